"""The local engine: pure torch, tiny random-init models, synthetic arithmetic. CPU by default, one GPU if present.
(Its checkpoints are evaluated by the local backend, workflow/eval/backends.py.)

Determinism is what makes resume exact: every random draw of step t (which problems, which samples) comes from
generators seeded by (seed, t), not from a stream carried across steps, so a stage restarted from its step-k
checkpoint replays steps k+1... bit for bit.
"""

from __future__ import annotations

import copy
import functools
import math
import time
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from workflow import preemption
from workflow.algos.flops import generation_flops, rl_step_flops, sft_flops
from workflow.algos.losses import sft_loss, token_logprobs, token_weights
from workflow.algos.schedules import constant, scaled_lr, warmup_constant, warmup_cosine
from workflow.algos.sharded import clip_and_step
from workflow.checkpoint import load_trainer_state, remove_stale_temporaries, save_checkpoint
from workflow.config import ModelConfig, PretrainConfig, RLConfig, TaskConfig
from workflow.engines import lora
from workflow.engines.rl_batch import mixed_closure, rollout
from workflow.methods.registry import build_mix, build_update_rule
from workflow.engines.tiny_lm import (TOKENIZER, build_model, device, forward_logits, load_model, micro_slices,
                                      pack, step_seed)
from workflow.benchmarks.arithmetic import document, sample_train
from workflow.layout import CHECKPOINTS, latest_checkpoint, step_dir
from workflow.preflight import TorchProbe
from workflow.progress import StepProgress, say
from workflow.results.train_log import TrainLog
from workflow.stages import PretrainStage, RLStage, SFTStage


def sft_accumulate(model, batch: dict[str, torch.Tensor], micro_batch_size: int | None) -> float:
    """Forward + backward over the batch in micro-batches with the GLOBAL token-mean loss; returns the loss.

    The gradient equals the single-batch gradient for any micro-batch size (see algos/losses.py)."""
    weights = token_weights(batch["loss_mask"], "token-mean")  # on the CPU with the batch; slices move to the model
    total = 0.0
    for rows in micro_slices(len(batch["input_ids"]), micro_batch_size):
        logits = forward_logits(model, batch, rows)
        logp = token_logprobs(logits, batch["labels"][rows].to(logits.device))
        loss = sft_loss(logp, weights[rows].to(logp.device))
        loss.backward()
        total += float(loss.detach())
    return total


def sft_batch(task: TaskConfig, seed: int, step: int, batch_size: int) -> dict[str, torch.Tensor]:
    problems = sample_train(task, np.random.default_rng([seed, step]), batch_size)
    return demonstrations([(p.prompt, p.solution) for p in problems])


def text_batch(task: TaskConfig, pre: PretrainConfig, step: int) -> dict[str, torch.Tensor]:
    """A pretraining batch: training problems as plain-text documents (arithmetic.document), each ending (<eos>), in
    the styles' shares of `pre`, the loss on every token but the first (which nothing precedes). (Equations packed
    several to a sequence taught this model far less: 9% of held-out sums after 1,000 steps of 16 x 128 characters,
    against all but a few after 1,500 steps of 64 single equations, measured.)"""
    rng = np.random.default_rng([pre.seed, step])
    problems = sample_train(task, rng, pre.batch_size)
    draws = rng.random(pre.batch_size)
    styles = np.where(draws < pre.boxed_fraction, "boxed", np.where(draws < pre.boxed_fraction + pre.qa_fraction,
                                                                     "qa", "equation"))
    texts = [TOKENIZER.encode(document(p, str(s))) for p, s in zip(problems, styles)]
    return pack([t[:1] for t in texts], [t[1:] for t in texts], add_eos=[True] * len(texts))


def demonstrations(pairs: list[tuple[str, str]]) -> dict[str, torch.Tensor]:
    """(prompt, worked solution) pairs packed for SFT: the loss on the solution and its <eos>."""
    return pack([TOKENIZER.encode(q) for q, _ in pairs], [TOKENIZER.encode(a) for _, a in pairs],
                add_eos=[True] * len(pairs))


class _Trainer:
    """What SFT and RL share: model + optimizer + scheduler, checkpoint/resume, the step loop's bookkeeping."""

    def __init__(self, model, lr: float, weight_decay: float, schedule, out_dir: Path, log: TrainLog,
                 total_steps: int, checkpoint_every: int, rule=None, mix=None, until: int | None = None):
        self.model = model.to(device())
        self.params = lora.trainable(self.model)  # with LoRA: the adapters only
        self.opt = adamw(self.params, lr, weight_decay)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, schedule)
        self.rule, self.mix = rule, mix
        self.ckpt_root = out_dir / CHECKPOINTS
        self.log, self.total, self.every = log, total_steps, checkpoint_every
        self.until = total_steps if until is None else until  # a segment job stops (and checkpoints) here
        # the compute model's N: every parameter a token passes through (with LoRA the frozen base too)
        self.n_params = sum(p.numel() for p in self.model.parameters())
        self.step = self._resume()

    def _resume(self) -> int:
        remove_stale_temporaries(self.ckpt_root)
        found = latest_checkpoint(self.ckpt_root)
        if found is None:
            return 0
        step, path = found
        self.log.discard_after(step)  # rows of steps that the resumed run recomputes (see TrainLog)
        if lora.is_wrapped(self.model):  # the base is the stage's start, unchanged by training: the adapter only
            lora.load_adapter(self.model, path)
        else:
            self.model.load_state_dict(load_model(path).state_dict())
        state = load_trainer_state(path)
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        if self.rule is not None:
            self.rule.load_state_dict(state.get("rule", {}))
        if self.mix is not None:
            self.mix.load_state_dict(state.get("mix", {}))
        say(f"[yellow]{self.log.stage} {self.log.run_id}: resuming from checkpoint at step {step}/{self.total}[/]")
        return step

    def maybe_checkpoint(self) -> None:
        """Checkpoint on the interval and at the end; when the cluster asked us to stop (preemption, time
        limit), checkpoint this step whatever the interval and raise Preempted so the requeued job resumes here."""
        stop = preemption.requested() and self.step < self.until
        on_interval = self.step % self.every == 0 or self.step in (self.total, self.until)
        if on_interval or stop:
            self.log.flush()
            state = {"optimizer": self.opt.state_dict(), "scheduler": self.sched.state_dict(),
                     "rule": self.rule.state_dict() if self.rule is not None else {},
                     "mix": self.mix.state_dict() if self.mix is not None else {}}
            save_checkpoint(self.ckpt_root, self.step, self.model, state,
                            {"run_id": self.log.run_id, "stage": self.log.stage, "total_steps": self.total},
                            write_model=functools.partial(lora.write, self.model))
        if stop:
            raise preemption.Preempted(self.step)

    def final(self) -> Path:
        """The checkpoint of the step this job trained to (a segment's end; the last step)."""
        path = step_dir(self.ckpt_root, self.until)
        assert (path / "meta.json").is_file(), f"training ended without its checkpoint at step {self.until}"
        return path

    @property
    def lr(self) -> float:
        return float(self.opt.param_groups[0]["lr"])


def _supervised(tr: _Trainer, what: str, batch_at: Callable[..., dict[str, torch.Tensor]], model_cfg: ModelConfig,
                seed: int, micro_batch_size: int | None, max_grad_norm: float | None) -> Path:
    """The loop SFT and pretraining share: each step's batch from `batch_at(step=...)` (a pure function of the
    step, so a resumed stage replays its steps), the global token-mean loss, a clipped AdamW step."""
    progress = StepProgress(what, tr.total, start=tr.step)
    while tr.step < tr.total:
        t0 = time.perf_counter()
        batch = batch_at(step=tr.step)
        lr = tr.lr
        seed_dropout(model_cfg, seed, tr.step)
        tr.opt.zero_grad(set_to_none=True)
        loss = sft_accumulate(tr.model, batch, micro_batch_size)
        norm = float(clip_and_step(tr.params, tr.opt, max_grad_norm)[0])
        tr.sched.step()
        tr.step += 1
        tokens = int(batch["attention_mask"].sum())
        tr.log.record(step=tr.step, loss=loss, grad_norm=norm, lr=lr, backward_passes=1, optimizer_steps=1,
                      tokens=tokens, flops=sft_flops(tr.n_params, tokens), wall_s=time.perf_counter() - t0,
                      update_s=time.perf_counter() - t0)
        progress.update(tr.step, loss=loss)
        tr.maybe_checkpoint()
    return tr.final()


def with_lora(model, cfg: ModelConfig, seed: int):
    """The model as a stage trains it: wrapped in LoRA adapters when `model.lora` is set (workflow/engines/lora.py)."""
    return lora.wrap(model, cfg.lora, seed) if cfg.lora is not None else model


def seed_dropout(cfg: ModelConfig, *parts: int) -> None:
    """LoRA dropout draws from torch's global generator: seed it per step, so that a resumed stage replays its steps
    bit for bit (nothing else of the local engine draws from it, so without dropout nothing is seeded)."""
    if cfg.lora is not None and cfg.lora.dropout > 0:
        torch.manual_seed(step_seed(*parts, 11))


def probe_rows(batch_size: int, micro_batch_size: int | None) -> int:
    """How many of a job's first batch the integrity preflight checks: two of its micro-batches (so its own split has
    something to accumulate), at least 16 sequences (splits with unequal token counts), at most the batch. The check
    splits down to one sequence per micro-batch, so its cost grows with this, not with the job's batch size."""
    return min(batch_size, max(16, 2 * (micro_batch_size or 0)))


def adamw(params, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """The optimizer of every local stage."""
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay)


class LocalEngine:
    """Trains on the arithmetic task only (the run config refuses a `datasets` task here: `data` is always None)."""

    # ------------------------------------------------------------------------------------- integrity preflight
    def integrity_probe(self, stage: SFTStage | RLStage, init_ckpt: Path | None = None, data: Path | None = None, *,
                        accumulate=None, optimizer=None) -> TorchProbe:
        """The preflight's probe (workflow/preflight.py) on the stage's first batch, model and optimizer: an SFT
        batch from `init_ckpt` (its pretrained base; a fresh model without one), or an RL step's mixed batch sampled
        from `init_ckpt` (a fresh model without one). `accumulate`
        (SFT) and `optimizer` (a factory like `adamw`) replace the engine's own, so a test can plant the bugs."""
        make_optimizer = optimizer or adamw
        if isinstance(stage, SFTStage):
            sft = stage.sft
            start = load_model(init_ckpt) if init_ckpt else build_model(stage.model, TOKENIZER.vocab_size, sft.seed)
            model = with_lora(start, stage.model, sft.seed)  # (init_ckpt: its pretrained base)
            batch = sft_batch(stage.task, sft.seed, 0, probe_rows(sft.batch_size, sft.micro_batch_size))
            params = lora.trainable(model)
            backward = functools.partial(accumulate or sft_accumulate, model, batch)
            return TorchProbe(params, make_optimizer(params, sft.lr, sft.weight_decay), backward,
                              len(batch["input_ids"]), sft.micro_batch_size, sft.max_grad_norm)
        rl = stage.rl
        model = (load_model(init_ckpt) if init_ckpt else build_model(stage.model, TOKENIZER.vocab_size, stage.seed))
        ref = copy.deepcopy(model).eval().requires_grad_(False) if rl.uses_reference else None
        model = with_lora(model, stage.model, stage.seed)
        mix = build_mix(rl)
        prompts = max(1, math.ceil(probe_rows(rl.prompts_per_step * rl.group_size, rl.micro_batch_size) /
                                   rl.group_size))
        probe_rl = rl.model_copy(update={"prompts_per_step": prompts})
        step, problems, _, _, _ = rollout(model, ref, mix, stage.task, probe_rl, stage.seed, 0, rl.steps)
        params = lora.trainable(model)
        opt = make_optimizer(params, rl.lr, rl.weight_decay)
        if mix.interleaves_sft:  # what the method adds to GRPO is its SFT step: check that one (on this batch's)
            batch = demonstrations([(p.prompt, p.solution) for p in problems])
            return TorchProbe(params, opt, functools.partial(accumulate or sft_accumulate, model, batch),
                              len(batch["input_ids"]), rl.micro_batch_size, rl.max_grad_norm)
        return TorchProbe(params, opt, lambda m: mixed_closure(model, opt, step, rl, m, {})(),
                          len(step.rows["input_ids"]), rl.micro_batch_size, rl.max_grad_norm)

    # -------------------------------------------------------------------------------------- pretrain and SFT
    def pretrain(self, stage: PretrainStage, out_dir: Path, log: TrainLog) -> Path:
        """The capable base (config.pretrain): the random-init model trained on plain arithmetic text, every weight
        (no LoRA: adapters are for what starts from it)."""
        model_cfg, task, pre = stage.model, stage.task, stage.pretrain
        tr = _Trainer(build_model(model_cfg, TOKENIZER.vocab_size, pre.seed), pre.lr, pre.weight_decay,
                      warmup_cosine(pre.steps, pre.warmup_ratio, pre.min_lr_ratio), out_dir, log, pre.steps,
                      pre.checkpoint_every)
        batches = functools.partial(text_batch, task, pre)
        return _supervised(tr, f"pretrain {log.run_id}", batches, model_cfg, pre.seed, None, pre.max_grad_norm)

    def sft(self, stage: SFTStage, out_dir: Path, log: TrainLog, data: Path | None = None,
            base: Path | None = None) -> Path:
        """SFT from the pretrained base when the run has one (`base`), else from the random-init model."""
        model_cfg, task, sft = stage.model, stage.task, stage.sft
        schedule = (warmup_cosine(sft.steps, sft.warmup_ratio, sft.min_lr_ratio) if sft.schedule == "cosine"
                    else constant())
        start = load_model(base) if base is not None else build_model(model_cfg, TOKENIZER.vocab_size, sft.seed)
        tr = _Trainer(with_lora(start, model_cfg, sft.seed), sft.lr, sft.weight_decay, schedule, out_dir, log,
                      sft.steps, sft.checkpoint_every)
        batches = functools.partial(sft_batch, task, sft.seed, batch_size=sft.batch_size)
        return _supervised(tr, f"sft {log.run_id}", batches, model_cfg, sft.seed, sft.micro_batch_size,
                           sft.max_grad_norm)

    # -------------------------------------------------------------------------------------------------- RL
    def rl(self, stage: RLStage, init_ckpt: Path | None, out_dir: Path, log: TrainLog, data: Path | None = None,
           until: int | None = None) -> Path:
        model_cfg, task, rl, seed = stage.model, stage.task, stage.rl, stage.seed
        init = load_model(init_ckpt) if init_ckpt else build_model(model_cfg, TOKENIZER.vocab_size, seed)
        ref = copy.deepcopy(init).eval().requires_grad_(False) if rl.uses_reference else None
        tr = _Trainer(with_lora(init, model_cfg, seed), rl.lr, rl.weight_decay, warmup_constant(rl.warmup_steps),
                      out_dir, log, rl.steps, rl.checkpoint_every, rule=build_update_rule(rl), mix=build_mix(rl),
                      until=until)
        progress = StepProgress(f"rl {log.run_id}", tr.until, start=tr.step)
        while tr.step < tr.until:
            seed_dropout(model_cfg, seed, tr.step)
            row = self._rl_step(tr, ref, task, rl, seed)
            tr.step += 1
            log.record(step=tr.step, **row)
            progress.update(tr.step, reward=row["reward"], entropy=row["entropy"])
            tr.maybe_checkpoint()
        return tr.final()

    def _rl_step(self, tr: _Trainer, ref, task: TaskConfig, rl: RLConfig, seed: int) -> dict:
        t0 = time.perf_counter()
        step, problems, rewards, truncated, fast = rollout(tr.model, ref, tr.mix, task, rl, seed, tr.step, tr.total)
        t_gen = time.perf_counter()
        if step is None:  # Slow2Fast kept no group: no update; the lr schedule still counts the step
            lr = tr.lr
            with warnings.catch_warnings():  # (torch warns of a schedule step before any optimizer step)
                warnings.simplefilter("ignore", UserWarning)
                tr.sched.step()
            return {**fast, "backward_passes": 0, "optimizer_steps": 0, "lr": lr, "entropy": None,
                    "flops": generation_flops(tr.n_params, fast["tokens"]), "wall_s": time.perf_counter() - t0,
                    "gen_s": t_gen - t0, "update_s": 0.0}
        record: dict[str, float | None] = {}
        closure = mixed_closure(tr.model, tr.opt, step, rl, rl.micro_batch_size, record)
        tr.rule.on_rollout(step.signals)  # SFPO's trigger looks at the policy entropy of this rollout
        lr = tr.lr
        stats = tr.rule.step(tr.params, tr.opt, closure)
        sft_term = record.pop("sft_loss")
        row = {**stats.as_row(), **record}
        flops = rl_step_flops(tr.n_params, step.generated_tokens, stats.backward_passes,
                              trained_tokens=step.trained_tokens, ref_model=ref is not None)
        tokens = step.tokens
        due = tr.mix.after_step([[p.prompt, p.solution] for p in problems], rewards)
        if due:  # an interleaved SFT step on the demonstrations the method asked for (ReLIFT)
            demo_batch = demonstrations(due)
            tr.opt.zero_grad(set_to_none=True)
            with scaled_lr(tr.opt, tr.mix.lr_scale):
                row["interleaved_sft_loss"] = sft_accumulate(tr.model, demo_batch, rl.micro_batch_size)
                clip_and_step(tr.params, tr.opt, rl.max_grad_norm)
            sft_tokens = int(demo_batch["attention_mask"].sum())
            row.update(backward_passes=row["backward_passes"] + 1, optimizer_steps=row["optimizer_steps"] + 1,
                       interleaved_sft_rows=len(due))
            flops += sft_flops(tr.n_params, sft_tokens)
            tokens += sft_tokens
        tr.sched.step()
        t_end = time.perf_counter()
        row.update(step.rollout_metrics(rewards, truncated), lr=lr, tokens=tokens, flops=flops, wall_s=t_end - t0,
                   gen_s=t_gen - t0, update_s=t_end - t_gen)
        if tr.mix.name != "none":
            row.update(step.mix_metrics(row["loss"], sft_term), **tr.mix.step_metrics())
        return {**row, **fast}  # (with Slow2Fast: rollouts = every sequence sampled, dropped groups included)
