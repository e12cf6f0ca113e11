"""The local engine: pure torch, tiny random-init models, synthetic arithmetic. CPU by default, one GPU if present.
(Its checkpoints are evaluated by the local backend, workflow/eval/backends.py.)

Determinism is what makes resume exact: every random draw of step t (which problems, which samples) comes from
generators seeded by (seed, t), not from a stream carried across steps, so a stage restarted from its step-k
checkpoint replays steps k+1... bit for bit.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from workflow import preemption
from workflow.algos.flops import rl_step_flops, sft_flops
from workflow.algos.losses import (clipped_policy_loss, group_advantages, kl_k3, sft_loss, token_entropy,
                                   token_logprobs, token_weights)
from workflow.algos.registry import build_update_rule
from workflow.algos.schedules import constant, warmup_cosine
from workflow.algos.sharded import clip_and_step
from workflow.checkpoint import load_trainer_state, remove_stale_temporaries, save_checkpoint
from workflow.config import RLConfig, TaskConfig
from workflow.engines.tiny_lm import (TOKENIZER, build_model, device, forward_logits, load_model, micro_slices,
                                      pack, sample, step_seed)
from workflow.layout import CHECKPOINTS, latest_checkpoint
from workflow.progress import StepProgress, say
from workflow.results.train_log import TrainLog
from workflow.stages import RLStage, SFTStage
from workflow.tasks.arithmetic import reward, sample_train


def sft_accumulate(model, batch: dict[str, torch.Tensor], micro_batch_size: int | None) -> float:
    """Forward + backward over the batch in micro-batches with the GLOBAL token-mean loss; returns the loss.

    The gradient equals the single-batch gradient for any micro-batch size (see algos/losses.py)."""
    weights = token_weights(batch["loss_mask"], "token-mean")
    total = 0.0
    for rows in micro_slices(len(batch["input_ids"]), micro_batch_size):
        logp = token_logprobs(forward_logits(model, batch, rows), batch["labels"][rows].to(weights.device))
        loss = sft_loss(logp, weights[rows].to(logp.device))
        loss.backward()
        total += float(loss.detach())
    return total


def sft_batch(task: TaskConfig, seed: int, step: int, batch_size: int) -> dict[str, torch.Tensor]:
    problems = sample_train(task, np.random.default_rng([seed, step]), batch_size)
    return pack([TOKENIZER.encode(p.prompt) for p in problems], [TOKENIZER.encode(p.solution) for p in problems],
                add_eos=[True] * len(problems))


class _Trainer:
    """What SFT and RL share: model + optimizer + scheduler, checkpoint/resume, the step loop's bookkeeping."""

    def __init__(self, model, lr: float, weight_decay: float, schedule, out_dir: Path, log: TrainLog,
                 total_steps: int, checkpoint_every: int, rule=None):
        self.model = model.to(device())
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, schedule)
        self.rule = rule
        self.ckpt_root = out_dir / CHECKPOINTS
        self.log, self.total, self.every = log, total_steps, checkpoint_every
        self.n_params = sum(p.numel() for p in self.params)
        self.step = self._resume()

    def _resume(self) -> int:
        remove_stale_temporaries(self.ckpt_root)
        found = latest_checkpoint(self.ckpt_root)
        if found is None:
            return 0
        step, path = found
        self.log.discard_after(step)  # rows of steps that the resumed run recomputes (see TrainLog)
        self.model.load_state_dict(load_model(path).state_dict())
        state = load_trainer_state(path)
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        if self.rule is not None:
            self.rule.load_state_dict(state.get("rule", {}))
        say(f"[yellow]{self.log.stage} {self.log.run_id}: resuming from checkpoint at step {step}/{self.total}[/]")
        return step

    def maybe_checkpoint(self, on_checkpoint: Callable[[int], None] | None = None) -> None:
        """Checkpoint on the interval and at the end; when the cluster asked us to stop (preemption, time
        limit), checkpoint this step whatever the interval and raise Preempted so the requeued job resumes here.
        `on_checkpoint(step)` runs after each interval checkpoint (an Optuna trial's intermediate evals)."""
        stop = preemption.requested() and self.step < self.total
        on_interval = self.step % self.every == 0 or self.step == self.total
        if on_interval or stop:
            self.log.flush()
            state = {"optimizer": self.opt.state_dict(), "scheduler": self.sched.state_dict(),
                     "rule": self.rule.state_dict() if self.rule is not None else {}}
            save_checkpoint(self.ckpt_root, self.step, self.model, state,
                            {"run_id": self.log.run_id, "stage": self.log.stage, "total_steps": self.total})
        if stop:
            raise preemption.Preempted(self.step)
        if on_interval and on_checkpoint is not None:
            on_checkpoint(self.step)

    def final(self) -> Path:
        found = latest_checkpoint(self.ckpt_root)
        assert found is not None and found[0] == self.total, "training ended without its final checkpoint"
        return found[1]

    @property
    def lr(self) -> float:
        return float(self.opt.param_groups[0]["lr"])


class LocalEngine:
    """Trains on the arithmetic task only (the run config refuses a `datasets` task here: `data` is always None)."""

    # ------------------------------------------------------------------------------------------------- SFT
    def sft(self, stage: SFTStage, out_dir: Path, log: TrainLog, data: Path | None = None) -> Path:
        model_cfg, task, sft = stage.model, stage.task, stage.sft
        schedule = (warmup_cosine(sft.steps, sft.warmup_ratio, sft.min_lr_ratio) if sft.schedule == "cosine"
                    else constant())
        tr = _Trainer(build_model(model_cfg, TOKENIZER.vocab_size, sft.seed), sft.lr, sft.weight_decay, schedule,
                      out_dir, log, sft.steps, sft.checkpoint_every)
        progress = StepProgress(f"sft {log.run_id}", sft.steps, start=tr.step)
        while tr.step < sft.steps:
            t0 = time.perf_counter()
            batch = sft_batch(task, sft.seed, tr.step, sft.batch_size)
            lr = tr.lr
            tr.opt.zero_grad(set_to_none=True)
            loss = sft_accumulate(tr.model, batch, sft.micro_batch_size)
            norm, _ = clip_and_step(tr.params, tr.opt, sft.max_grad_norm)
            tr.sched.step()
            tr.step += 1
            tokens = int(batch["attention_mask"].sum())
            log.record(step=tr.step, loss=loss, grad_norm=norm, lr=lr, backward_passes=1, optimizer_steps=1,
                       tokens=tokens, flops=sft_flops(tr.n_params, tokens), wall_s=time.perf_counter() - t0,
                       update_s=time.perf_counter() - t0)
            progress.update(tr.step, loss=loss)
            tr.maybe_checkpoint()
        return tr.final()

    # -------------------------------------------------------------------------------------------------- RL
    def rl(self, stage: RLStage, init_ckpt: Path | None, out_dir: Path, log: TrainLog,
           on_checkpoint: Callable[[int], None] | None = None, data: Path | None = None) -> Path:
        model_cfg, task, rl, seed = stage.model, stage.task, stage.rl, stage.seed
        init = load_model(init_ckpt) if init_ckpt else build_model(model_cfg, TOKENIZER.vocab_size, seed)
        ref = copy.deepcopy(init).eval().requires_grad_(False) if rl.kl_coef > 0 else None
        tr = _Trainer(init, rl.lr, rl.weight_decay, constant(), out_dir, log, rl.steps, rl.checkpoint_every,
                      rule=build_update_rule(rl))
        progress = StepProgress(f"rl {log.run_id}", rl.steps, start=tr.step)
        while tr.step < rl.steps:
            row = self._rl_step(tr, ref, task, rl, seed)
            tr.step += 1
            log.record(step=tr.step, **row)
            progress.update(tr.step, reward=row["reward"], entropy=row["entropy"])
            tr.maybe_checkpoint(on_checkpoint)
        return tr.final()

    def _rl_step(self, tr: _Trainer, ref, task: TaskConfig, rl: RLConfig, seed: int) -> dict:
        t0 = time.perf_counter()
        problems = sample_train(task, np.random.default_rng([seed, tr.step, 1]), rl.prompts_per_step)
        prompts = [TOKENIZER.encode(p.prompt) for p in problems for _ in range(rl.group_size)]
        gen = torch.Generator(device=device()).manual_seed(step_seed(seed, tr.step, 2))
        responses, truncated = sample(tr.model, prompts, rl.temperature, rl.max_new_tokens, gen)
        rewards = torch.tensor([reward(TOKENIZER.decode(r), problems[i // rl.group_size].answer)
                                for i, r in enumerate(responses)])
        adv = group_advantages(rewards.view(-1, rl.group_size), rl.std_norm).flatten()
        t_gen = time.perf_counter()

        batch = pack(prompts, responses, add_eos=[not t for t in truncated])
        mask = batch["loss_mask"]
        weights = token_weights(mask, rl.loss_agg, max_len=rl.max_new_tokens)
        slices = micro_slices(len(prompts), rl.micro_batch_size)
        labels = batch["labels"].to(device())
        with torch.no_grad():  # the behaviour policy's log-probs, recomputed rather than taken from sampling
            old_logp, ent, ref_logp = [], [], []
            for rows in slices:
                logits = forward_logits(tr.model, batch, rows)
                old_logp.append(token_logprobs(logits, labels[rows]))
                ent.append(token_entropy(logits))
                if ref is not None:
                    ref_logp.append(token_logprobs(forward_logits(ref, batch, rows), labels[rows]))
        old_logp = torch.cat(old_logp)
        ref_logp = torch.cat(ref_logp) if ref is not None else None
        mask_d, weights_d, adv_d = mask.to(device()), weights.to(device()), adv.to(device())
        n_tokens = float(mask.sum())
        last: dict[str, float] = {}

        def closure() -> torch.Tensor:
            tr.opt.zero_grad(set_to_none=True)
            total = torch.zeros((), device=device())
            clipped = kl_sum = 0.0
            for rows in slices:
                logp = token_logprobs(forward_logits(tr.model, batch, rows), labels[rows])
                pl, was_clipped = clipped_policy_loss(logp, old_logp[rows], adv_d[rows], rl.clip_low, rl.clip_high)
                loss = (pl * weights_d[rows]).sum()
                if ref_logp is not None:
                    kl = kl_k3(logp, ref_logp[rows])
                    loss = loss + rl.kl_coef * (kl * weights_d[rows]).sum()
                    kl_sum += float((kl.detach() * mask_d[rows]).sum())
                loss.backward()
                total += loss.detach()
                clipped += float((was_clipped * mask_d[rows]).sum())
            last.update(clip_frac=clipped / max(n_tokens, 1.0),
                        kl=kl_sum / max(n_tokens, 1.0) if ref is not None else None)
            return total

        entropy = float((torch.cat(ent) * mask_d).sum() / max(n_tokens, 1.0))
        tr.rule.on_rollout({"entropy": entropy})  # SFPO's trigger looks at the policy entropy of this rollout
        lr = tr.lr
        stats = tr.rule.step(tr.params, tr.opt, closure)
        tr.sched.step()
        t_end = time.perf_counter()
        seq_tokens = int(batch["attention_mask"].sum())  # prompt + response: what generation and training process
        flops = rl_step_flops(tr.n_params, seq_tokens, stats.backward_passes, ref_model=ref is not None)
        row = {
            "reward": float(rewards.mean()), "entropy": entropy,
            "lr": lr, "rollouts": len(prompts), "tokens": seq_tokens, "flops": flops,
            "response_len": n_tokens / len(prompts), "truncated_frac": float(np.mean(truncated)),
            "wall_s": t_end - t0, "gen_s": t_gen - t0, "update_s": t_end - t_gen, **last,
        }
        row.update(stats.as_row())
        return row
