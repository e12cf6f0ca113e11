"""The integrity preflight (workflow/preflight.py) on the local engine: a correct job passes, the paper's two bugs
are caught and named (a mean of per-micro-batch means; an optimizer that only sees the first micro-batch), a job
with a planted bug fails before it trains, and `rlsweep preflight` runs the same check on demand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import REPO
from workflow import preflight
from workflow.algos.losses import token_logprobs
from workflow.config import RunConfig
from workflow.engines import local
from workflow.engines.local import LocalEngine
from workflow.engines.rl_batch import build_step_batch, mixed_closure
from workflow.engines.tiny_lm import TOKENIZER, build_model, forward_logits, micro_slices
from workflow.layout import stage_dir
from workflow.launch import run_stage
from workflow.methods.registry import build_mix, mix_names
from workflow.results.catalog import query
from workflow.stages import parse_stage, stage_config
from workflow.identity import stable_id

SFT = {"model": {"hidden": 32, "n_layers": 1}, "sft": {"steps": 4, "batch_size": 12, "micro_batch_size": 4,
                                                        "checkpoint_every": 4}}


def mean_of_means(model, batch, micro_batch_size):
    """The classic accumulation bug: each micro-batch's own token mean, averaged over micro-batches."""
    slices = micro_slices(len(batch["input_ids"]), micro_batch_size)
    for rows in slices:
        mask = batch["loss_mask"][rows]
        logp = token_logprobs(forward_logits(model, batch, rows), batch["labels"][rows])
        (-(logp * mask).sum() / mask.sum() / len(slices)).backward()


class FirstMicroBatchOnly(torch.optim.AdamW):
    """The CPU-offload bug: the optimizer steps with the gradient as it was after the first micro-batch."""

    def __init__(self, params, lr, weight_decay):
        super().__init__(params, lr=lr, weight_decay=weight_decay)
        self.first: dict[torch.Tensor, torch.Tensor] = {}
        for p in params:
            p.register_post_accumulate_grad_hook(self._seen)

    def _seen(self, p: torch.Tensor) -> None:
        self.first.setdefault(p, p.grad.detach().clone())

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.first.clear()
        super().zero_grad(set_to_none)

    @torch.no_grad()
    def step(self, closure=None):
        for p, g in self.first.items():
            p.grad.copy_(g)
        return super().step()


def sft_stage(**sft):
    cfg = RunConfig.model_validate({**SFT, "sft": {**SFT["sft"], **sft}})
    return parse_stage("sft", stage_config(cfg, "sft"))


def test_a_correct_sft_job_passes_for_every_split():
    result = preflight.check(LocalEngine().integrity_probe(sft_stage()))
    assert result.passed and result.splits == [1, 4, 6] and result.update_split == 4
    assert result.grad_diff < 1e-5 and result.update_diff < 1e-5


def test_a_mean_of_micro_batch_means_is_caught_as_a_gradient_problem():
    result = preflight.check(LocalEngine().integrity_probe(sft_stage(), accumulate=mean_of_means))
    assert not result.passed and result.grad_diff > 1e-2
    assert result.problems[0].startswith("(a) gradient: micro-batches of ")
    assert "not the global token mean" in result.problems[0]
    assert result.problems[1].endswith("it follows from (a)")  # the update differs too, for the same reason
    with pytest.raises(preflight.IntegrityError, match=r"(?s)integrity preflight of sft x failed.*\(a\) gradient"):
        preflight.enforce(result, "sft x")


def test_an_optimizer_that_sees_only_the_first_micro_batch_is_caught_as_an_update_problem():
    result = preflight.check(LocalEngine().integrity_probe(sft_stage(), optimizer=FirstMicroBatchOnly))
    assert result.grad_diff < 1e-5  # the accumulated .grad is right: only the update shows it
    assert [p[:10] for p in result.problems] == ["(b) update"] and result.update_diff > 1e-2
    assert "after 3 micro-batches of 4" in result.problems[0]
    # with the whole batch in one pass the bug cannot show; the check still compares a 2-way split
    whole = preflight.check(LocalEngine().integrity_probe(sft_stage(micro_batch_size=None),
                                                          optimizer=FirstMicroBatchOnly))
    assert whole.update_split == 6 and not whole.passed


@pytest.mark.parametrize("mix", mix_names())
def test_every_mixed_loss_has_the_same_gradient_for_any_micro_batch_split(mix):
    """Each method's step batch (rollouts, traces, prefixes, demonstrations) with rewards that give every term a
    gradient: the closure's gradient is the whole batch's whatever the split."""
    cfg = RunConfig.model_validate({**SFT, "rl": {"mix": mix, "group_size": 4, "prompts_per_step": 3,
                                                  "micro_batch_size": 2, "kl_coef": 0.1}})
    rl = cfg.rl
    model = build_model(cfg.model, TOKENIZER.vocab_size, 0)
    ref = build_model(cfg.model, TOKENIZER.vocab_size, 1).requires_grad_(False)
    m = build_mix(rl)
    rng = np.random.default_rng(0)
    prompts = [TOKENIZER.encode(f"Q:{a}+1=?A:") for a in (10, 200, 3)]
    demos = [TOKENIZER.encode(f"\\boxed{{{a}}}") for a in (11, 201, 4)]
    slots = [s for row in m.rollout_slots([len(d) for d in demos], 4, rng, progress=0.3) for s in row]
    responses = [demos[i // 4][: s.prefix] + list(rng.integers(3, 20, size=int(rng.integers(1, 9))))
                 if s.generate else demos[i // 4] for i, s in enumerate(slots)]
    rewards = np.array([[1, 0, 0, 1], [0, 0, 0, 0], [0, 1, 1, 1.0]])
    step = build_step_batch(model, ref, m, rl, prompts, demos, slots, responses, [False] * 12, rewards)
    params = list(model.parameters())
    opt = local.adamw(params, rl.lr, rl.weight_decay)
    probe = preflight.TorchProbe(params, opt, lambda mb: mixed_closure(model, opt, step, rl, mb, {})(),
                                 len(step.rows["input_ids"]), rl.micro_batch_size, rl.max_grad_norm)
    result = preflight.check(probe)
    assert result.passed and not result.vacuous and result.grad_diff < 1e-5, result


def test_a_job_with_a_planted_bug_fails_before_it_trains_and_runs_records_why(tmp_path, monkeypatch):
    cfg = stage_config(RunConfig.model_validate(SFT), "sft")
    run_stage("sft", "ok", stable_id(cfg), cfg, results_root=tmp_path)
    row = query("SELECT status, preflight, preflight_grad_diff FROM runs", tmp_path).to_pylist()[0]
    assert row["status"] == "completed" and row["preflight"] == "passed" and row["preflight_grad_diff"] < 1e-5

    monkeypatch.setattr(local, "sft_accumulate", mean_of_means)  # the engine's own accumulation, broken
    bad = stage_config(RunConfig.model_validate({**SFT, "sft": {**SFT["sft"], "seed": 1}}), "sft")
    with pytest.raises(preflight.IntegrityError, match=r"\(a\) gradient"):
        run_stage("sft", "bad", stable_id(bad), bad, results_root=tmp_path)
    row = query("SELECT status, error, preflight FROM runs WHERE sweep = 'bad'", tmp_path).to_pylist()[0]
    assert row["status"] == "failed" and row["preflight"] == "failed" and "(a) gradient" in row["error"]
    assert not query("SELECT * FROM train_steps WHERE sweep = 'bad'", tmp_path).num_rows  # nothing trained
    assert not list(stage_dir(tmp_path, "sft", stable_id(bad)).glob("checkpoints/*"))


@pytest.mark.slow
def test_rlsweep_preflight_checks_every_sft_and_mixed_policy_job(tmp_path):
    import subprocess
    import sys
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: s\nbase:\n  model: {hidden: 32, n_layers: 1}\n  sft: {batch_size: 8, micro_batch_size: 3}\n"
                     "  rl: {prompts_per_step: 2, group_size: 4, micro_batch_size: 3}\n"
                     "grid:\n  rl.mix: [none, hpt]\n")
    out = subprocess.run([sys.executable, "-m", "workflow.cli", "preflight", str(sweep), "--results",
                          str(tmp_path / "r")], cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if "│" in line]
    assert len(lines) == 2 and "sft" in lines[0] and "hpt" in lines[1]  # GRPO has no SFT term: not checked
    assert all("passed" in line or "no gradient" in line for line in lines)
