"""The integrity preflight on the verl engine (workflow/engines/verl/torchrun/preflight.py), on CPU with verl's own SFT
trainer and FSDP2 engine in a 2-rank gloo torchrun child: a correct configuration passes, the paper's two bugs
planted into verl (tests/support/verl_preflight_bugs.py: a loss that is a mean of per-micro-batch means; an optimizer step
that sees only the first micro-batch) are caught and named, and a verl SFT job that fails it never trains."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

from helpers import SUPPORT, need

need("verl")

from workflow import preflight  # noqa: E402
from workflow.config import RunConfig  # noqa: E402
from workflow.engines.verl.job.engine import VerlEngine  # noqa: E402
from workflow.layout import stage_dir  # noqa: E402
from workflow.stages import parse_stage, stage_config  # noqa: E402

pytestmark = [pytest.mark.serial("verl"), pytest.mark.slow]  # README "Tests": one at a time with the other verl modules

HERE = SUPPORT  # the worker scripts and bug plug-ins
MEAN_OF_MEANS = "verl_preflight_bugs:mean_of_micro_batch_means"
FIRST_ONLY = "verl_preflight_bugs:first_micro_batch_only"
# Each probe is a 2-rank torchrun child (~25-35 s of a loaded CI worker). CI keeps three: the mixed-policy step on
# verl's actor, correct and with each bug, so the gradient check (a) and the update check (b) run on verl in CI. The
# SFT probes are long tests since issue 58: a correct SFT configuration passes in CI inside the verl chain's SFT job
# (tests/verl/test_verl_cpu.py, with the chain's settings: here with offload and a warm-up), and a job that fails
# its preflight never trains in the fast tier on the local engine (tests/unit/core/test_preflight.py).
PREFLIGHT_CODE = ["workflow/preflight.py", "workflow/engines/verl/", "tests/support/verl_preflight_bugs.py"]


def sft_cfg(sft_overrides: dict | None = None, **sft) -> RunConfig:
    return RunConfig.model_validate({
        "engine": {"name": "verl", "verl": {"model_path": "rlsweep:tiny", "device": "cpu",
                                            "sft_overrides": sft_overrides or {}}},
        "sft": {"steps": 4, "batch_size": 8, "micro_batch_size": 2, "checkpoint_every": 4, **sft}})


def sft_stage(sft_overrides: dict | None = None, **sft):
    return parse_stage("sft", stage_config(sft_cfg(sft_overrides, **sft), "sft"))


@pytest.fixture(autouse=True)
def bugs_importable(monkeypatch):
    """The torchrun children import the planted bugs by name."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.mark.long(covers=PREFLIGHT_CODE)
def test_a_correct_verl_sft_configuration_passes():
    """With the job's own settings as verl composes them: here param + optimizer offload (sft_overrides) and a
    warm-up whose first lr is 0 (the update is measured at the base lr, or it would be 0 and say nothing)."""
    from omegaconf import OmegaConf
    offload = {"engine.param_offload": True, "engine.optimizer_offload": True}
    probe = VerlEngine().integrity_probe(sft_stage(offload, steps=20, schedule="cosine", warmup_ratio=0.5))
    child = OmegaConf.load(Path(probe.workdir.name) / "verl_sft.yaml")  # what the torchrun child built verl from
    assert child.engine.param_offload and child.engine.optimizer_offload and child.optim.lr_warmup_steps_ratio == 0.5
    # 2 ranks x 4 rows (two of the job's micro-batches of 2 per rank), the job's split, 1, and one pass per rank
    assert (probe.ranks, probe.n_rows, probe.micro_batch_size) == (2, 8, 2)
    result = preflight.check(probe)
    assert result.passed and not result.vacuous, result.problems
    assert result.splits == [1, 2, 4] and result.update_split == 2
    assert result.grad_diff < 1e-5 and result.update_diff < 1e-4
    assert float(probe.gradient(None).norm()) > 0.1 and float(probe.update(None).norm()) > 0.1  # not vacuous


@pytest.mark.long(covers=PREFLIGHT_CODE)
def test_a_mean_of_micro_batch_means_is_caught_and_named():
    probe = VerlEngine().integrity_probe(sft_stage(), accumulate=MEAN_OF_MEANS)
    result = preflight.check(probe)
    assert not result.passed and result.grad_diff > 1e-2
    assert result.problems[0].startswith("(a) gradient: micro-batches of ")
    assert "not the global token mean" in result.problems[0]
    assert result.problems[1].startswith("(b) update") and result.problems[1].endswith("it follows from (a)")
    # one micro-batch per rank: the loss is then a per-rank mean, which only the 2 ranks can show
    assert preflight.relative(probe.gradient(4), probe.gradient(None)) > 1e-2


@pytest.mark.long(covers=PREFLIGHT_CODE)
def test_an_optimizer_step_that_sees_only_the_first_micro_batch_is_caught_and_named():
    result = preflight.check(VerlEngine().integrity_probe(sft_stage(), optimizer=FIRST_ONLY))
    assert result.grad_diff < 1e-5  # the accumulated gradient is right: only the update shows it
    assert [p[:10] for p in result.problems] == ["(b) update"] and result.update_diff > 1e-2
    assert "only the first micro-batch" in result.problems[0]


@pytest.mark.long(covers=PREFLIGHT_CODE)
def test_a_verl_sft_job_that_fails_the_preflight_never_trains(tmp_path, monkeypatch):
    from workflow.launch import run_stage
    from workflow.results.catalog import query
    from workflow.identity import stable_id
    broken = functools.partialmethod(VerlEngine.integrity_probe, accumulate=MEAN_OF_MEANS)
    monkeypatch.setattr(VerlEngine, "integrity_probe", broken)
    cfg = stage_config(sft_cfg(), "sft")
    with pytest.raises(preflight.IntegrityError, match=r"\(a\) gradient"):
        run_stage("sft", "bad", stable_id(cfg), cfg, results_root=tmp_path)
    row = query("SELECT status, preflight, preflight_grad_diff FROM runs", tmp_path).to_pylist()[0]
    assert row["status"] == "failed" and row["preflight"] == "failed" and row["preflight_grad_diff"] > 1e-2
    assert not (stage_dir(tmp_path, "sft", stable_id(cfg)) / "verl_sft.yaml").exists()  # verl's SFT never started
    assert not query("SELECT * FROM train_steps", tmp_path).num_rows


# ---------------------------------------------------------------------------- a mixed-policy RL job's actor step
MIXED_MEAN_OF_MEANS = "verl_preflight_bugs:mixed_mean_of_micro_batch_means"


def rl_stage(mix: str, **rl):
    cfg = RunConfig.model_validate({
        "engine": {"name": "verl", "verl": {"model_path": "rlsweep:tiny", "device": "cpu"}},
        "eval": {"backend": "vllm"},
        "rl": {"mix": mix, "steps": 4, "prompts_per_step": 4, "group_size": 4, "micro_batch_size": 2,
               "max_new_tokens": 24, **rl}})
    return parse_stage("rl", stage_config(cfg, "rl"))


def test_a_correct_mixed_policy_rl_step_on_verl_passes():
    """SRFT's step has every kind of token the mixed loss weighs: on-policy (clipped), expert (shaped), SFT."""
    import torch
    probe = VerlEngine().integrity_probe(rl_stage("srft"))
    rows = torch.load(Path(probe.workdir.name) / "rows.pt")  # the planned step the child trained on
    assert (probe.ranks, probe.n_rows, probe.micro_batch_size) == (2, 8, 2) and len(rows) == 8
    assert all(float(r["rlsweep_shaped"].sum()) > 0 for r in rows[3::4])  # each group's trace: expert tokens
    assert sum(float(r["rlsweep_w_sft"].sum()) for r in rows) > 0 and sum(float(r["rlsweep_w_rl"].sum()) for r in rows)
    result = preflight.check(probe)
    assert result.passed and not result.vacuous, result.problems
    assert result.grad_diff < 1e-5 and result.update_diff < 1e-4


def test_a_mixed_loss_that_is_a_mean_of_micro_batch_means_is_caught_on_verl():
    result = preflight.check(VerlEngine().integrity_probe(rl_stage("hpt"), accumulate=MIXED_MEAN_OF_MEANS))
    assert not result.passed and result.grad_diff > 1e-2
    assert result.problems[0].startswith("(a) gradient") and "not the global token mean" in result.problems[0]


def test_a_mixed_policy_step_whose_optimizer_sees_only_the_first_micro_batch_is_caught_on_verl():
    result = preflight.check(VerlEngine().integrity_probe(rl_stage("luffy"), optimizer=FIRST_ONLY))
    assert result.grad_diff < 1e-5 and [p[:10] for p in result.problems] == ["(b) update"]
