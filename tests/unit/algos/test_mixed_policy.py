"""The mixed-policy methods (rl.mix): each mechanism on a case small enough to check by hand, then every method
through a real local RL stage, its train_steps columns and its run identity."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from workflow.algos.losses import mixed_token_loss, shaped_off_policy_loss
from workflow.algos.mix import ON_POLICY, Slot
from workflow.methods.hpt.algorithm import HPT
from workflow.methods.luffy.algorithm import LUFFY
from workflow.methods.prefix_rft.algorithm import PrefixRFT
from workflow.methods.registry import mix_names
from workflow.methods.relift.algorithm import ReLIFT
from workflow.methods.srft.algorithm import SRFT
from helpers import REPO, planned_jobs, refusal, run_cli
from pydantic import ValidationError
from workflow.algos.mix_batch import advantage_kept
from workflow.config import RunConfig
from workflow.engines.tiny_lm import pack, prefix_mask
from workflow.eval.plan import eval_steps
from workflow.launch import run_stage
from workflow.results.catalog import query
from workflow.results.membership import Member, record
from workflow.stages import stage_config
from workflow.strict import format_validation_error
from workflow.sweep.expand import load_sweep
from workflow.identity import stable_id

RNG = np.random.default_rng(0)


# ------------------------------------------------------------------------------------------------------- LUFFY
def test_luffy_shaped_weight_and_gradient_on_one_token():
    """f(pi) = pi / (pi + lam); d(-f A)/d log pi = -A lam pi / (pi + lam)^2. At pi = 0.3, lam = 0.1, A = 2:
    f = 0.75 and the gradient is -2 x 0.1 x 0.3 / 0.16 = -0.375 (the plain ratio at pi = pi_old: -A = -2)."""
    logp = torch.tensor([[np.log(0.3)]], dtype=torch.float64, requires_grad=True)
    loss = shaped_off_policy_loss(logp, torch.tensor([2.0], dtype=torch.float64), lam=0.1)
    assert loss.item() == pytest.approx(-2 * 0.75)
    loss.sum().backward()
    assert logp.grad.item() == pytest.approx(-0.375)
    # in a mixed batch: the shaped loss on the off-policy token, the clipped ratio on the on-policy one
    logp2 = torch.log(torch.tensor([[0.3, 0.3]], dtype=torch.float64))
    mixed, clipped = mixed_token_loss(logp2, logp2, torch.tensor([2.0], dtype=torch.float64),
                                      torch.tensor([[True, False]]), 0.2, 0.28, 0.1)
    assert mixed[0].tolist() == pytest.approx([-1.5, -2.0])  # -f A and -ratio A (ratio 1)
    assert clipped.tolist() == [[False, False]]


def test_luffy_puts_the_trace_in_the_last_slots_and_advantages_span_the_mixed_group():
    slots = LUFFY(n_off=1).rollout_slots([5, 7], group_size=4, rng=RNG)
    assert slots == [[ON_POLICY] * 3 + [Slot(5, False)], [ON_POLICY] * 3 + [Slot(7, False)]]
    with pytest.raises(ValueError, match="n_off"):
        LUFFY(n_off=4).rollout_slots([5], group_size=4, rng=RNG)
    plan = LUFFY(n_off=1).loss_plan(np.array([[0, 0, 0, 1.0]]), {})
    assert plan.rl_rows.all() and plan.advantages is None and plan.metrics["trace_reward"] == 1.0


# --------------------------------------------------------------------------------------------------------- HPT
def test_hpt_switches_per_prompt_on_the_number_of_correct_rollouts():
    rewards = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 1.0]])
    plan = HPT(threshold=0).loss_plan(rewards, {})
    assert plan.sft_weight.tolist() == [1.0, 0.0, 0.0]  # only the all-wrong prompt is fine-tuned
    assert plan.rl_rows.tolist() == [False] * 4 + [True] * 8  # and its rollouts leave the RL loss
    plan = HPT(threshold=1, sft_coef=0.5).loss_plan(rewards, {})
    assert plan.sft_weight.tolist() == [0.5, 0.5, 0.0]
    assert plan.metrics["sft_prompt_frac"] == pytest.approx(2 / 3)


# ------------------------------------------------------------------------------------------------------ ReLIFT
def test_relift_buffer_fills_with_unsolved_prompts_and_releases_sft_batches():
    mix = ReLIFT(buffer_size=3)
    assert mix.after_step(["a", "b"], np.array([[0, 0], [1, 0.0]])) == []  # a unsolved, b solved
    assert mix.buffer == ["a"]
    assert mix.after_step(["c", "d"], np.array([[0, 0], [0, 0.0]])) == ["a", "c", "d"]  # full: one SFT batch
    assert mix.buffer == [] and mix.step_metrics() == {"buffer_size": 0}
    assert mix.after_step(["e", "f", "g", "h"], np.zeros((4, 2))) == ["e", "f", "g"]  # at most buffer_size
    state = json.loads(json.dumps(mix.state_dict()))  # it goes into checkpoints
    resumed = ReLIFT(buffer_size=3)
    resumed.load_state_dict(state)
    assert resumed.buffer == ["h"] and resumed.steps == 3
    every = ReLIFT(buffer_size=100, every=2)
    assert every.after_step(["x"], np.zeros((1, 2))) == []
    assert every.after_step(["y"], np.ones((1, 2))) == ["x"]  # step 2: whatever the buffer holds


# -------------------------------------------------------------------------------------------------- Prefix-RFT
def test_prefix_rft_prefix_lengths_schedule_and_masks():
    mix = PrefixRFT(n_prefixed=1, min_frac=0.2, max_frac=0.8)
    assert mix.upper(0.0) == pytest.approx(0.8) and mix.upper(1.0) == pytest.approx(0.2)
    assert mix.upper(0.5) == pytest.approx(0.5)
    slots = mix.rollout_slots([10] * 200, group_size=3, rng=np.random.default_rng(1), progress=0.0)
    assert all(row[:2] == [ON_POLICY, ON_POLICY] and row[2].generate for row in slots)
    lens = [row[2].prefix for row in slots]
    assert min(lens) >= 2 and max(lens) <= 8 and len(set(lens)) > 3  # floor(U[0.2, 0.8] x 10)
    late = mix.rollout_slots([10] * 50, group_size=3, rng=np.random.default_rng(1), progress=1.0)
    assert {row[2].prefix for row in late} == {2}  # the window has closed to min_frac
    # the mask marks exactly the first k response tokens of each row
    batch = pack([[5, 6], [5, 6, 7]], [[8, 9, 10], [11, 12]], add_eos=[True, False])
    mask = prefix_mask(batch["loss_mask"], [2, 0])
    assert mask.int().tolist() == [[0, 1, 1, 0, 0], [0, 0, 0, 0, 0]]
    assert prefix_mask(batch["loss_mask"], [9, 9]).int().tolist() == batch["loss_mask"].int().tolist()  # capped
    assert (mask <= batch["loss_mask"].bool()).all()


def test_only_the_highest_entropy_off_policy_tokens_keep_their_advantage():
    off = torch.tensor([[True, True, True, True, False]])
    ent = torch.tensor([[0.1, 0.9, 0.5, 0.2, 0.0]])
    assert advantage_kept(off, ent, top=0.5).tolist() == [[0, 1, 1, 0, 1]]  # 2 of 4; on-policy untouched
    assert advantage_kept(off, ent, top=None).tolist() == [[1] * 5]


# -------------------------------------------------------------------------------------------------------- SRFT
def test_srft_weights_follow_the_entropy_of_demonstrations_and_rollouts():
    rewards = np.array([[1, 0, 1.0]])  # two rollouts, then the demonstration in the group
    signals = {"demo_entropy": np.array([0.5]), "seq_entropy": np.array([0.2, 0.4, 0.0]),
               "advantages": np.array([0.3, -0.7, 0.4])}
    plan = SRFT(sft_coef=0.5, rl_coef=0.1).loss_plan(rewards, signals)
    assert plan.sft_weight.tolist() == pytest.approx([0.5 * np.exp(-0.5)])
    assert plan.advantages.tolist() == pytest.approx([0.1 * np.exp(0.2), -1.0, 0.4])
    assert SRFT().rollout_slots([6], 3, RNG) == [[ON_POLICY, ON_POLICY, Slot(6, False)]]


# -------------------------------------------------------------------------------------------------- the config
def problems(cfg: dict) -> str:
    with pytest.raises(ValidationError) as e:
        RunConfig.model_validate(cfg)
    return "; ".join(format_validation_error(e.value))


def test_mix_settings_are_validated_naming_the_key(tmp_path):
    assert problems({"rl": {"mix": "lufy"}}) == ("rl.mix: unknown mixed-policy method 'lufy'; known: hpt, luffy, "
                                                 "none, prefix_rft, relift, srft")
    assert problems({"rl": {"mix": "luffy", "group_size": 4, "luffy": {"n_off": 4}}}).startswith(
        "rl.luffy.n_off: 4 must be < group_size (4)")
    assert problems({"rl": {"mix": "prefix_rft", "prefix_rft": {"min_frac": 0.9, "max_frac": 0.1}}}).startswith(
        "rl.prefix_rft.min_frac: 0.9 must be <= max_frac (0.1)")
    assert problems({"rl": {"hpt": {"treshold": 1}}}).startswith("rl.hpt.treshold")
    sweep = tmp_path / "bad.yaml"
    sweep.write_text("name: bad\ngrid:\n  rl.mix: [none, luffy]\n  rl.luffy.n_off: [8]\n")
    assert "rl.luffy.n_off: 8 must be < group_size (8)" in refusal(sweep)  # at load, before any job


def test_only_the_selected_mix_block_is_in_the_run_id():
    plain = stage_config(RunConfig(), "rl")
    assert "mix" not in plain["rl"] and not set(plain["rl"]) & {"luffy", "hpt", "srft", "relift", "prefix_rft"}
    luffy = stage_config(RunConfig.model_validate({"rl": {"mix": "luffy"}}), "rl")
    assert luffy["rl"]["mix"] == "luffy" and "luffy" in luffy["rl"] and "hpt" not in luffy["rl"]
    other_hpt = stage_config(RunConfig.model_validate({"rl": {"mix": "luffy", "hpt": {"threshold": 3}}}), "rl")
    assert stable_id(other_hpt) == stable_id(luffy)  # an unselected block changes nothing
    assert RunConfig.model_validate({"rl": {"mix": "hpt", "update": "sfpo"}}).rl.method == "hpt+sfpo"


# ---------------------------------------------------------------------------------------- through the engine
BASE = {"model": {"hidden": 32, "n_layers": 1}, "sft": {"steps": 10, "batch_size": 16, "checkpoint_every": 10}}
RL = {"steps": 2, "prompts_per_step": 4, "group_size": 4, "checkpoint_every": 2, "max_new_tokens": 12,
      "micro_batch_size": 5}


@pytest.fixture(scope="module")
def sft_stage(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    cfg = stage_config(RunConfig.model_validate(BASE), "sft")
    return root, run_stage("sft", "mix", stable_id(cfg), cfg, results_root=root), stable_id(cfg)


@pytest.mark.parametrize("mix", [m for m in mix_names() if m != "none"])
def test_every_method_trains_on_the_local_engine_and_logs_its_mechanism(sft_stage, mix):
    root, sft, sft_id = sft_stage
    cfg = RunConfig.model_validate({**BASE, "rl": {**RL, "mix": mix, "relift": {"buffer_size": 2}}})
    rcfg = stage_config(cfg, "rl", sft_id=sft_id)
    run_id = stable_id(rcfg)
    run_stage("rl", "mix", run_id, rcfg, results_root=root, init=sft)
    rows = query(f"SELECT * FROM train_steps WHERE run_id = '{run_id}' ORDER BY step", root).to_pylist()
    assert [r["step"] for r in rows] == [1, 2]
    assert query(f"SELECT method FROM runs WHERE run_id = '{run_id}'", root).column(0).to_pylist() == [mix]
    for r in rows:
        assert np.isfinite(r["loss"]) and r["flops"] > 0 and r["sft_loss_share"] is not None
        if mix in ("luffy", "srft", "prefix_rft"):
            assert r["rollouts"] == 12 if mix != "prefix_rft" else r["rollouts"] == 16
        if mix in ("luffy", "srft"):
            assert 0 < r["off_policy_frac"] < 1 and r["trace_reward"] if mix == "luffy" else True
        if mix == "srft":
            assert r["sft_weight"] > 0 and r["sft_frac"] > 0
        if mix == "hpt":  # a 10-step SFT model solves nothing yet: every prompt is fine-tuned, nothing else
            assert r["sft_prompt_frac"] == 1.0 and r["sft_frac"] == 1.0 and r["sft_loss_share"] == 1.0
        if mix == "relift":  # 4 unsolved prompts a step, SFT on 2 of them, 2 more stay in the buffer
            assert r["interleaved_sft_rows"] == 2 and r["backward_passes"] == 2 and r["optimizer_steps"] == 2
        if mix == "prefix_rft":
            assert r["prefix_len"] > 0 and r["off_policy_frac"] > 0
    if mix == "relift":
        assert [r["buffer_size"] for r in rows] == [2, 4]


def test_eval_at_start_evaluates_the_model_rl_starts_from(sft_stage):
    """Step 0 of an RL run with eval.at_start is its SFT checkpoint: the SFT-alone row of an SFT -> RL comparison."""
    root, sft, sft_id = sft_stage
    cfg = RunConfig.model_validate({**BASE, "rl": RL, "eval": {"at_start": True, "k": 2, "n_problems": 8}})
    assert eval_steps(cfg) == [0, 2]
    rcfg = stage_config(cfg, "rl", sft_id=sft_id)
    run_id = stable_id(rcfg)
    done = run_stage("rl", "start", run_id, rcfg, results_root=root, init=sft)
    ecfg = stage_config(cfg, "eval", run_id=run_id)
    assert ecfg["eval"]["at_start"] is True and "at_start" not in stage_config(RunConfig(), "eval")["eval"]
    eval_done = run_stage("eval", "start", stable_id(ecfg), ecfg, results_root=root, checkpoint_from=done, step=0)
    evaluated = eval_done.parent / json.loads(eval_done.read_text())["checkpoint"]
    assert evaluated.resolve() == (sft.parent / json.loads(sft.read_text())["checkpoint"]).resolve()
    record(root, "start", [Member("eval", stable_id(ecfg))])  # what Snakemake records when it plans the sweep
    assert query("SELECT DISTINCT step FROM eval_scores", root, "start").column(0).to_pylist() == [0]
    assert problems({"sft": {"enabled": False}, "eval": {"at_start": True}}).startswith(
        "eval.at_start: the local engine without SFT starts RL from a random initialisation")


@pytest.mark.slow  # plans through Snakemake
def test_the_mixed_policy_sweep_validates_and_its_smoke_plans_every_method_in_both_regimes(tmp_path):
    """The shipped sweep's shape: every method from a capable (pretrained) base and from the random-init model, 3
    seeds each, the same settings in both; and its smoke version's DAG. Every method's stage job runs in
    test_every_method_trains_on_the_local_engine_and_logs_its_mechanism (and in tests/unit/core/test_gpu_check.py);
    a smoke sweep through Snakemake runs end to end in tests/e2e/test_smoke.py; the pretrain stage in
    tests/unit/engines/test_pretrain.py."""
    sweep = load_sweep(REPO / "sweeps" / "mixed_policy.yaml")
    by_setting = {}
    for r in sweep.runs:
        by_setting.setdefault((r.method, r.config.pretrain.enabled), []).append(r)
    assert {k: len(rs) for k, rs in by_setting.items()} == {(m, base): 3 for base in (True, False)
                                                            for m in ("grpo", "luffy", "srft", "hpt", "relift",
                                                                      "prefix_rft")}
    for (method, capable), runs in by_setting.items():
        for r in runs:
            assert r.config.sft.enabled == (method == "grpo")
            assert r.config.eval.at_start == (method == "grpo" or capable)  # a random init has no step 0 to evaluate
            assert (r.pretrain_id is not None) == capable
    settings = {k: {r.config.rl.model_dump_json(exclude={"mix"}) for r in rs} for k, rs in by_setting.items()}
    for method, _ in by_setting:  # the regimes differ in their base only
        assert settings[(method, True)] == settings[(method, False)]
    assert len(sweep.jobs("pretrain")) == 1  # one base for every run of the capable regime
    assert len(sweep.jobs("sft")) == 2  # one SFT job per base for the three SFT -> RL seeds
    # its smoke version, with the methods' longer runs and the pretraining shortened too (smoke keeps grid axes)
    raw = yaml.safe_load((REPO / "sweeps" / "mixed_policy.yaml").read_text())
    raw["grid"]["rl.steps"]["values"], raw["grid"]["eval.every"]["values"] = [10], [10]
    short = tmp_path / "mixed_policy.yaml"
    short.write_text(yaml.safe_dump(raw, sort_keys=False))
    res = run_cli("smoke", str(short), "--results", str(tmp_path), "--dry-run", timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    # per base: one SFT (the SFT -> RL run's), one RL run per method (one seed), each evaluated once; the starts:
    # the SFT checkpoint of each base and the capable base itself, which its other four runs copy
    assert planned_jobs(res.stdout) == {"pretrain": 1, "sft": 2, "rl": 12, "eval": 12, "eval_start": 3,
                                        "eval_copy": 4, "aggregate": 1, "report": 1, "all": 1}


def test_an_expert_trace_is_off_policy_to_its_last_token_and_rollouts_stay_on_policy():
    from workflow.engines.rl_batch import build_step_batch
    from workflow.engines.tiny_lm import TOKENIZER, build_model
    cfg = RunConfig.model_validate({**BASE, "rl": {"mix": "luffy", "group_size": 3, "prompts_per_step": 1}})
    model = build_model(cfg.model, TOKENIZER.vocab_size, 0)
    prompt, demo = TOKENIZER.encode("Q:12+30=?A:"), TOKENIZER.encode("\\boxed{42}")
    slots = LUFFY().rollout_slots([len(demo)], 3, RNG)[0]
    responses = [TOKENIZER.encode("\\boxed{41}"), TOKENIZER.encode("7"), demo]
    step = build_step_batch(model, None, LUFFY(), cfg.rl, [prompt], [demo], slots, responses, [False] * 3,
                            np.array([[0.0, 0.0, 1.0]]))
    rl_mask, shaped = step.rl_mask.bool(), step.shaped
    assert shaped[2].tolist() == rl_mask[2].tolist() and int(shaped[2].sum()) == len(demo) + 1  # + its <eos>
    assert not shaped[:2].any()
    assert step.off_policy_tokens == len(demo) + 1 and step.generated_tokens < step.trained_tokens
