"""The local engine: sampling with a KV cache, checkpoint/resume exactness, train_steps bookkeeping."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import REPO, SFT_FOR_RL, kill_and_resume_rl
from workflow.config import ModelConfig, RunConfig
from workflow.engines.local import TOKENIZER
from workflow.engines.tiny_lm import build_model, sample
from workflow.layout import stage_dir
from workflow.launch import run_stage
from workflow.results.catalog import query
from workflow.stages import stage_config
from workflow.identity import stable_id


def test_kv_cache_sampling_matches_uncached_greedy_decoding():
    model = build_model(ModelConfig(n_layers=2, hidden=32, n_heads=2), TOKENIZER.vocab_size, seed=1).double().eval()
    prompts = [TOKENIZER.encode(p) for p in ("Q:1+2=?A:", "Q:(13+4)*5=?A:", "Q:99+10=?A:")]  # unequal: left padding
    got, truncated = sample(model, prompts, temperature=0.0, max_new_tokens=12, generator=None)
    for p, g, t in zip(prompts, got, truncated):
        ids, out = torch.tensor([p]), []
        with torch.no_grad():
            for _ in range(12):
                nxt = int(model(input_ids=ids).logits[0, -1].argmax())
                if nxt == TOKENIZER.EOS:
                    break
                out.append(nxt)
                ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
        assert g == out
        assert t == (len(out) == 12)


def test_sampling_is_reproducible_from_its_generator():
    model = build_model(ModelConfig(n_layers=1, hidden=32, n_heads=2), TOKENIZER.vocab_size, seed=0).eval()
    prompts = [TOKENIZER.encode("Q:1+2=?A:")] * 8
    a, _ = sample(model, prompts, 1.0, 10, torch.Generator().manual_seed(5))
    b, _ = sample(model, prompts, 1.0, 10, torch.Generator().manual_seed(5))
    c, _ = sample(model, prompts, 1.0, 10, torch.Generator().manual_seed(6))
    assert a == b and a != c


# ------------------------------------------------------------------------------------------------------ resume
RL = {"steps": 30, "prompts_per_step": 8, "group_size": 8, "checkpoint_every": 3, "max_new_tokens": 20}


@pytest.fixture(scope="module")
def sft_done(sft_for_rl) -> tuple[Path, RunConfig]:
    return sft_for_rl, RunConfig.model_validate({**SFT_FOR_RL, "rl": RL})


def _final_weights(done: Path) -> dict[str, torch.Tensor]:
    d = json.loads(done.read_text())
    return load_file(done.parent / d["checkpoint"] / "model.safetensors")


@pytest.mark.slow
def test_rl_killed_after_a_checkpoint_resumes_to_identical_weights_and_steps(sft_done, tmp_path):
    sft, cfg = sft_done
    sft_id = json.loads(sft.read_text())["id"]
    rcfg = stage_config(cfg, "rl", sft_id=sft_id)
    run_id = stable_id(rcfg)

    # reference: uninterrupted, in this process
    ref_root = tmp_path / "ref"
    ref_done = run_stage("rl", "resume", run_id, rcfg, results_root=ref_root, init=sft)

    # same run as a subprocess, SIGKILLed once its step-3 checkpoint exists, then restarted
    root = tmp_path / "killed"
    done = kill_and_resume_rl("resume", run_id, rcfg, sft, root, RL["steps"], wait_s=120)
    ref_w, got_w = _final_weights(ref_done), _final_weights(done)
    init_w = load_file(sft.parent / json.loads(sft.read_text())["checkpoint"] / "model.safetensors")
    assert any(not torch.equal(ref_w[k], init_w[k]) for k in ref_w), "RL did not change the weights"
    for k in ref_w:
        assert torch.equal(ref_w[k], got_w[k]), k

    steps_sql = "SELECT step, loss, reward FROM train_steps WHERE stage = 'rl' ORDER BY step"
    got, ref = query(steps_sql, root).to_pylist(), query(steps_sql, ref_root).to_pylist()
    assert [r["step"] for r in got] == list(range(1, RL["steps"] + 1))  # every step exactly once
    assert got == ref
    assert any(r["reward"] > 0 for r in ref)
    status = query("SELECT status FROM runs WHERE stage = 'rl'", root).column("status").to_pylist()
    assert status == ["completed"]


def test_failed_stage_is_recorded_and_leaves_no_done_file(tmp_path):
    cfg = RunConfig.model_validate({"model": {"n_layers": 1, "hidden": 32, "n_heads": 2}, "sft": {"enabled": False}})
    rcfg = stage_config(cfg, "rl", sft_id=None)
    with pytest.raises(FileNotFoundError):  # an init checkpoint that does not exist
        run_stage("rl", "fail", stable_id(rcfg), rcfg, results_root=tmp_path, init=tmp_path / "missing.json")
    rows = query("SELECT status, error FROM runs", tmp_path).to_pylist()
    assert rows[0]["status"] == "failed" and "missing.json" in rows[0]["error"]
    assert not list(tmp_path.rglob("DONE.json"))


def test_stage_refuses_a_config_that_does_not_match_its_id(tmp_path):
    cfg = stage_config(RunConfig(), "sft")
    with pytest.raises(ValueError, match="does not match its config"):
        run_stage("sft", "x", "0123456789ab", cfg, results_root=tmp_path)


def test_rl_warm_up_ramps_the_learning_rate_and_only_a_warm_up_enters_the_runs_id(tmp_path):
    """rl.warmup_steps: lr x (step + 1) / warmup_steps for the first steps, then lr; the id of a run without warm-up
    is the one it had before the setting existed (test_run_ids: every shipped sweep keeps its ids)."""
    base = {"model": {"n_layers": 1, "hidden": 32, "n_heads": 2}, "sft": {"enabled": False}}
    rl = {"steps": 3, "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4, "lr": 1e-3, "checkpoint_every": 3}
    plain = stage_config(RunConfig.model_validate({**base, "rl": rl}), "rl", sft_id=None)
    assert "warmup_steps" not in plain["rl"]
    rcfg = stage_config(RunConfig.model_validate({**base, "rl": {**rl, "warmup_steps": 2}}), "rl", sft_id=None)
    assert rcfg["rl"]["warmup_steps"] == 2 and stable_id(rcfg) != stable_id(plain)
    run_stage("rl", "warm", stable_id(rcfg), rcfg, results_root=tmp_path)
    lrs = query("SELECT lr FROM train_steps ORDER BY step", tmp_path).column(0).to_pylist()
    assert lrs == pytest.approx([5e-4, 1e-3, 1e-3])


@pytest.mark.slow
@pytest.mark.parametrize("update, passes", [("sfpo", 3), ("gxpo", 3)])
def test_rl_stage_with_sfpo_and_gxpo_records_accounting_and_diagnostics(sft_done, tmp_path, update, passes):
    sft, cfg = sft_done
    cfg = RunConfig.model_validate({**cfg.model_dump(), "rl": {**RL, "steps": 4, "checkpoint_every": 2,
                                                               "update": update, "sfpo": {"K": 2, "alpha": 0.5},
                                                               "gxpo": {"K": 5, "alpha": 0.5}}})
    rcfg = stage_config(cfg, "rl", sft_id=json.loads(sft.read_text())["id"])
    assert set(rcfg["rl"]) & {"sfpo", "gxpo"} == {update}  # only the selected rule's settings are in the id
    done = run_stage("rl", "rules", stable_id(rcfg), rcfg, results_root=tmp_path, init=sft)
    rows = query("SELECT * FROM train_steps ORDER BY step", tmp_path).to_pylist()
    assert [r["backward_passes"] for r in rows] == [passes] * 4
    assert [r["optimizer_steps"] for r in rows] == [passes] * 4
    assert all(r["alpha"] == 0.5 for r in rows)
    if update == "gxpo":
        # steps whose batch had no learning signal (all rewards in every group equal) have no gradient at all
        signal = [r for r in rows if r["grad_norm"] > 0]
        assert signal and all(r["gxpo_inactive_frac"] == 1.0 for r in rows if r["grad_norm"] == 0)
        assert all(0.0 <= r["gxpo_inactive_frac"] < 0.5 and r["gxpo_gcorr_norm"] > 0 for r in signal)
        assert all(r["gxpo_ratio_p10"] <= r["gxpo_ratio_p50"] <= r["gxpo_ratio_p90"] for r in signal)
    # the learning-rate scheduler stepped once per training step, not once per inner optimizer step
    ckpt = done.parent / json.loads(done.read_text())["checkpoint"]
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    assert state["scheduler"]["last_epoch"] == 4
    assert "gate" in state["rule"]  # the gate's window survives a restart


@pytest.mark.slow
def test_a_rule_added_as_one_registered_class_runs_on_the_local_engine(sft_done, tmp_path, monkeypatch):
    """tests/support/toy_rule.py is all it takes: the run config accepts its name, the engine builds and steps it, and the
    number it declares (toy_steps_taken) is a train_steps column."""
    import importlib

    import toy_rule
    from workflow.methods import registry
    # registered for this test only
    monkeypatch.setattr(registry.METHODS, "loaded", dict(registry.METHODS.loaded))
    importlib.reload(toy_rule)
    sft, cfg = sft_done
    with pytest.raises(ValueError, match="unknown update rule 'toy_three_steps'; known: grpo, gxpo, sfpo, "
                                         "toy_two_steps"):
        RunConfig.model_validate({"rl": {"update": "toy_three_steps"}})
    cfg = RunConfig.model_validate({**cfg.model_dump(), "rl": {**RL, "steps": 2, "checkpoint_every": 2,
                                                               "update": "toy_two_steps"}})
    rcfg = stage_config(cfg, "rl", sft_id=json.loads(sft.read_text())["id"])
    run_stage("rl", "toy", stable_id(rcfg), rcfg, results_root=tmp_path, init=sft)
    rows = query("SELECT * FROM train_steps ORDER BY step", tmp_path).to_pylist()
    assert [(r["backward_passes"], r["optimizer_steps"]) for r in rows] == [(2, 2), (2, 2)]
    assert [r["toy_steps_taken"] for r in rows] == [2, 2]
    assert query("SELECT method FROM runs", tmp_path).column("method").to_pylist() == ["toy_two_steps"]


@pytest.mark.slow
def test_rl_preempted_by_signal_checkpoints_that_step_then_resumes_exactly(sft_done, tmp_path):
    """SLURM's warning signal (USR2, what submitit uses) mid-run: the stage checkpoints the step it is in, off the
    checkpoint interval, exits 75 and is recorded as preempted; a second copy of the run meanwhile is refused by the
    run lock; the re-run resumes from the signal's checkpoint to the same weights as an uninterrupted run."""
    sft, cfg = sft_done
    rcfg = stage_config(cfg, "rl", sft_id=json.loads(sft.read_text())["id"])
    run_id = stable_id(rcfg)
    ref_done = run_stage("rl", "pre", run_id, rcfg, results_root=tmp_path / "ref", init=sft)

    root = tmp_path / "preempted"
    cmd = [sys.executable, "scripts/stage.py", "rl", "--sweep", "pre", "--id", run_id, "--init", str(sft),
           "--results", str(root), "--config", json.dumps(rcfg)]
    run_dir = stage_dir(root, "rl", run_id)
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not (run_dir / "checkpoints" / "step_000003").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "stage ended before its first checkpoint"
        time.sleep(0.01)

    # frozen (SIGSTOP) while its twin starts: alive and holding the lock however slowly the twin's Python starts,
    # and the USR2 sent before SIGCONT stops it at its very next step boundary
    os.kill(proc.pid, signal.SIGSTOP)
    twin = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert twin.returncode == 1
    assert f"rl {run_id} is already running: pid {proc.pid} on" in twin.stderr and "RUNNING.lock" in twin.stderr

    os.kill(proc.pid, signal.SIGUSR2)
    os.kill(proc.pid, signal.SIGCONT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 75, out
    stopped = int(re.search(r"after checkpointing step (\d+)", out).group(1))
    assert 3 < stopped < RL["steps"]
    assert (run_dir / "checkpoints" / f"step_{stopped:06d}").is_dir()  # this step, whatever the interval says
    assert not (run_dir / "RUNNING.lock").exists()
    assert query("SELECT status FROM runs WHERE stage = 'rl'", root).column("status").to_pylist() == ["preempted"]

    second = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert f"resuming from checkpoint at step {stopped}/{RL['steps']}" in second.stderr
    ref_w, got_w = _final_weights(ref_done), _final_weights(run_dir / "DONE.json")
    assert all(torch.equal(ref_w[k], got_w[k]) for k in ref_w)
    steps = query("SELECT step FROM train_steps WHERE stage = 'rl' ORDER BY step", root).column("step").to_pylist()
    assert steps == list(range(1, RL["steps"] + 1))
    assert query("SELECT status FROM runs WHERE stage = 'rl'", root).column("status").to_pylist() == ["completed"]


def test_resume_discards_rows_flushed_after_the_checkpoint_it_resumes_from(tmp_path):
    """An attempt that flushed steps 4-6 and died before saving step 6's checkpoint: the resumed run recomputes
    them, so the old file must go (a preemption may flush them again under another range, e.g. 4-5)."""
    from workflow.results.train_log import TrainLog
    log = TrainLog(tmp_path, "s", "rl", "000000000abc")
    for first, last in ((1, 3), (4, 6)):
        for step in range(first, last + 1):
            log.record(step=step, loss=0.0)
        log.flush()
    log.discard_after(3)
    assert query("SELECT step FROM train_steps ORDER BY step", tmp_path).column("step").to_pylist() == [1, 2, 3]


def test_a_packed_batch_scores_the_same_without_its_padding_mask():
    """forward_logits gives the model no padding mask (a host sync in transformers' SDPA path each forward): pack()
    right-pads, so under the causal mask every real token's logits are those of the masked forward."""
    from workflow.engines.tiny_lm import forward_logits, pack
    model = build_model(ModelConfig(n_layers=2, hidden=32, n_heads=2), TOKENIZER.vocab_size, 0).eval()
    prompts = [TOKENIZER.encode("Q:1+2=?A:"), TOKENIZER.encode("Q:12+30=?A:")]
    batch = pack(prompts, [TOKENIZER.encode("3"), TOKENIZER.encode("\\boxed{42}")], add_eos=[True, False])
    assert (batch["attention_mask"] == 0).any()  # the first row is padded
    with torch.no_grad():
        masked = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
        unmasked = forward_logits(model, batch)
    real = batch["attention_mask"][:, :-1].bool()
    torch.testing.assert_close(unmasked[real], masked[real], rtol=1e-5, atol=1e-5)
