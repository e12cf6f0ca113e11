"""One RL step's trained batch on the local engine: the groups' sequences (rollouts, expert traces, prefixed
rollouts) and the demonstrations a mixed-policy method trains on, with every per-token weight computed ONCE over
the whole batch, and the closure an update rule calls. workflow/algos/mix.py states the loss; the integrity
preflight (workflow/preflight.py) checks this closure's gradient under other micro-batch splits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from workflow.algos import part
from workflow.algos.losses import (group_advantages, kl_k3, mixed_token_loss, sft_loss, token_entropy,
                                   token_logprobs, token_weights)
from workflow.algos.mix import LossPlan, MixedPolicy, Slot, sft_loss_share, step_columns
from workflow.algos.mix_batch import advantage_kept, row_mean
from workflow.config import RLConfig, TaskConfig
from workflow.engines.tiny_lm import (TOKENIZER, forward_logits, micro_slices, model_device, pack, prefix_mask, sample,
                                      step_seed)
from workflow.benchmarks.arithmetic import Problem, reward, sample_train
from workflow.methods.registry import build_parts


def rollout(model, ref, mix: MixedPolicy, task: TaskConfig, rl: RLConfig, seed: int, step: int,
            total: int) -> tuple[StepBatch | None, list[Problem], np.ndarray, list[bool], dict]:
    """Step `step`'s rollout: its problems (drawn from (seed, step) alone, so a resumed run replays it), the
    method's slots sampled and scored, the parts switched on applied (workflow/algos/part.py: FAST-GRPO's), the
    trained batch built. Returns the batch (None when no group was kept: the step trains nothing), the problems, the rewards
    [P, G] and which sequences hit max_new_tokens, of the groups trained on, and FAST-GRPO's columns of the step
    (workflow/results/schemas.py)."""
    gen = torch.Generator(device=model_device(model)).manual_seed(step_seed(seed, step, 2))  # where the model samples
    parts = build_parts(rl)
    groups = sample_groups(model, mix, task, rl, seed, step, step / total, gen)
    sampled = groups
    columns: dict[str, float] = {}
    if part.filtering(parts):
        groups, columns = kept_groups(model, mix, task, rl, seed, step, step / total, gen, groups, parts)
        sampled = columns.pop("_sampled")
        columns["rollouts"] = len(sampled.slots)  # every sequence sampled, those of dropped groups included
    if not groups.problems:  # the step trains nothing; what it sampled still cost its generation
        columns.update(tokens=sampled.tokens(), reward=float(sampled.rewards.mean()))
        return None, [], np.zeros((0, rl.group_size)), [], columns
    advantage_rewards = groups.rewards
    bonus, bonus_columns = part.bonus(parts, groups.rewards, groups.lengths(), rl.max_new_tokens,
                                      [p.prompt for p in groups.problems], [len(p) for p in groups.prompts])
    if bonus is not None:
        advantage_rewards = groups.rewards + bonus
        columns.update(bonus_columns)
    kl_coef = part.kl_coef(parts, groups.rewards)
    if kl_coef is not None:
        columns["kl_coef_mean"] = float(kl_coef.mean())
    batch = build_step_batch(model, ref, mix, rl, groups.prompts, groups.demos, groups.slots, groups.responses,
                             groups.truncated, advantage_rewards, kl_coef=kl_coef)
    dropped = sampled.tokens() - groups.tokens()  # generated, then dropped (Slow2Fast): generation FLOPs only
    batch.generated_tokens += dropped
    batch.tokens += dropped
    return batch, groups.problems, groups.rewards, groups.truncated, columns


@dataclass
class Groups:
    """One or more rounds of a step's sampled groups: per prompt its problem, tokens, demonstration and the G
    slots' sequences, truncation flags and rewards (row p * G + g)."""

    problems: list[Problem]
    prompts: list[list[int]]
    demos: list[list[int]]
    slots: list[Slot]
    responses: list[list[int]]
    truncated: list[bool]
    rewards: np.ndarray  # [P, G]

    def select(self, keep: np.ndarray) -> "Groups":
        g = self.rewards.shape[1]
        rows = [i for i in range(len(self.slots)) if keep[i // g]]
        return Groups([p for p, k in zip(self.problems, keep) if k], [p for p, k in zip(self.prompts, keep) if k],
                      [d for d, k in zip(self.demos, keep) if k], [self.slots[i] for i in rows],
                      [self.responses[i] for i in rows], [self.truncated[i] for i in rows], self.rewards[keep])

    def __add__(self, other: "Groups") -> "Groups":
        return Groups(self.problems + other.problems, self.prompts + other.prompts, self.demos + other.demos,
                      self.slots + other.slots, self.responses + other.responses, self.truncated + other.truncated,
                      np.concatenate([self.rewards, other.rewards]))

    def lengths(self) -> np.ndarray:
        """[P, G] response tokens."""
        return np.asarray([len(r) for r in self.responses], float).reshape(self.rewards.shape)

    def tokens(self) -> int:
        """Prompt + response tokens of the sequences the policy generated."""
        g = max(self.rewards.shape[1], 1)
        return sum(len(self.prompts[i // g]) + len(r) + (not t)  # + the eos of a finished response
                   for i, (r, s, t) in enumerate(zip(self.responses, self.slots, self.truncated)) if s.generate)


def sample_groups(model, mix: MixedPolicy, task: TaskConfig, rl: RLConfig, seed: int, step: int, progress: float,
                  gen: torch.Generator, round_: int = 0) -> Groups:
    """rl.prompts_per_step problems of the step (round 0: drawn from (seed, step); a refill round r > 0 from
    (seed, step, r)), the method's slots sampled with `gen` and scored."""
    rng = np.random.default_rng([seed, step, 1] + ([round_] if round_ else []))
    problems = sample_train(task, rng, rl.prompts_per_step)
    prompts = [TOKENIZER.encode(p.prompt) for p in problems]
    demos = [TOKENIZER.encode(p.solution) for p in problems]  # the demonstrations: the worked solutions
    slots = [s for row in mix.rollout_slots([len(d) for d in demos], rl.group_size,
                                            np.random.default_rng([seed, step, 3]), progress=progress)
             for s in row]
    responses, truncated = sample_slots(model, prompts, demos, slots, rl, gen)
    rewards = np.array([reward(TOKENIZER.decode(r), problems[i // rl.group_size].answer)
                        for i, r in enumerate(responses)]).reshape(len(problems), rl.group_size)
    return Groups(problems, prompts, demos, slots, responses, truncated, rewards)


def kept_groups(model, mix: MixedPolicy, task: TaskConfig, rl: RLConfig, seed: int, step: int, progress: float,
                gen: torch.Generator, first: Groups, parts: list[part.Part]) -> tuple[Groups, dict]:
    """The groups the filtering parts keep (FAST-GRPO's Slow2Fast: those of the phase's accuracy band); with refill
    rounds (Slow2Fast's `resample`), more rounds of prompts until rl.prompts_per_step groups are kept (at most
    refill_rounds extra rounds, then the step trains on those it has). Returns the kept groups (at most
    prompts_per_step) and the step's columns kept_groups, dropped_groups, extra_rollouts (and under "_sampled"
    every group sampled: rollouts, FLOPs)."""
    sampled, kept = first, first.select(part.keep(parts, first.rewards, progress))
    rounds, budget = 0, part.refill_rounds(parts)
    while len(kept.problems) < rl.prompts_per_step and rounds < budget:
        rounds += 1
        more = sample_groups(model, mix, task, rl, seed, step, progress, gen, round_=rounds)
        sampled = sampled + more
        kept = kept + more.select(part.keep(parts, more.rewards, progress))
    trained = kept.select(np.arange(len(kept.problems)) < rl.prompts_per_step)
    n_sampled = len(sampled.problems)
    return trained, {"kept_groups": len(trained.problems), "dropped_groups": n_sampled - len(kept.problems),
                     "extra_rollouts": rounds * rl.prompts_per_step * rl.group_size, "_sampled": sampled}


def sample_slots(model, prompts: list[list[int]], demos: list[list[int]], slots: list[Slot], rl: RLConfig,
                 gen: torch.Generator) -> tuple[list[list[int]], list[bool]]:
    """The groups' sequences (slot i belongs to prompt i // group_size): a slot's demonstration prefix followed,
    if it generates, by the policy's continuation (rl.max_new_tokens at most); an expert trace ends like a finished
    response. With only on-policy slots this is exactly one `sample` call on the prompts."""
    group = rl.group_size
    todo = [i for i, s in enumerate(slots) if s.generate]
    continued, cut = sample(model, [prompts[i // group] + demos[i // group][: slots[i].prefix] for i in todo],
                            rl.temperature, rl.max_new_tokens, gen) if todo else ([], [])
    responses = [demos[i // group][: s.prefix] for i, s in enumerate(slots)]
    truncated = [False] * len(slots)
    for i, tail, was_cut in zip(todo, continued, cut):
        responses[i], truncated[i] = responses[i] + tail, was_cut
    return responses, truncated


@dataclass
class StepBatch:
    """The trained rows of one step (rollout rows first, then demonstration rows) and their per-token tensors
    [B, T-1], on the training device."""

    rows: dict[str, torch.Tensor]  # input_ids, attention_mask, labels
    rl_mask: torch.Tensor  # RL tokens (response tokens of rollout rows)
    shaped: torch.Tensor | None  # bool: off-policy tokens trained with the shaped loss (None: there are none)
    adv: torch.Tensor  # per-token advantage (0 on SFT rows and on off-policy tokens the method leaves out)
    w_pol: torch.Tensor  # RL weight: rl.loss_agg weights over the RL rows x the plan's rl_scale
    w_kl: torch.Tensor  # the same without rl_scale, times the KL coefficient (rl.kl_coef or dynamic_kl's, per group)
    w_sft: torch.Tensor  # SFT weight: the plan's sft_weight / SFT tokens of the batch
    old_logp: torch.Tensor
    ref_logp: torch.Tensor | None
    lam: float
    signals: dict  # what the rollout measured (mix.py)
    plan: LossPlan
    slots: list[Slot]
    off_policy_tokens: int = 0  # RL tokens that are expert tokens
    rl_tokens: int = 0  # tokens under rl_mask (counted on the CPU, before the move: a count is a read on a GPU)
    sft_tokens: int = 0  # tokens with an SFT weight (w_sft > 0), counted likewise
    generated_tokens: int = 0  # prompt + response tokens of the sequences the policy sampled
    trained_tokens: int = 0  # tokens of the trained rows
    tokens: int = 0  # every sequence the step processed (sampled or trained on)
    response_tokens: list[float] = field(default_factory=list)  # per group sequence

    def rollout_metrics(self, rewards: np.ndarray, truncated: list[bool]) -> dict:
        """reward, response length and truncation of the policy's own sequences (not the expert traces)."""
        sampled = [i for i, s in enumerate(self.slots) if s.generate]
        return {"reward": float(rewards.flatten()[sampled].mean()), "entropy": self.signals["entropy"],
                "rollouts": len(sampled), "response_len": float(np.mean([self.response_tokens[i] for i in sampled])),
                "truncated_frac": float(np.mean([truncated[i] for i in sampled]))}

    def mix_metrics(self, loss: float, sft: float) -> dict:
        """What shows a mixed-policy method at work (docs/methods.md, "Mixed-policy methods"); `loss` and `sft` (its SFT
        term) of the step's first pass."""
        return {**step_columns(self.plan, float(self.rl_tokens), self.off_policy_tokens,
                               float(self.sft_tokens)),
                "sft_loss": sft, "sft_loss_share": sft_loss_share(loss - sft, sft)}


def build_step_batch(model, ref, mix: MixedPolicy, rl: RLConfig, prompts: list[list[int]], demos: list[list[int]],
                     slots: list[Slot], responses: list[list[int]], truncated: list[bool],
                     rewards: np.ndarray, kl_coef: np.ndarray | None = None) -> StepBatch:
    """Score the step's sequences with the behaviour policy, let the method plan the loss, keep the rows it trains.
    `kl_coef` [P]: each group's KL coefficient (FAST-GRPO's dynamic KL) instead of rl.kl_coef."""
    n_prompts, group = rewards.shape
    n_seq = len(slots)
    with_demos = mix.trains_on_demonstrations
    batch = pack([prompts[i // group] for i in range(n_seq)] + (prompts if with_demos else []),
                 responses + (demos if with_demos else []),
                 add_eos=[not t for t in truncated] + [True] * (n_prompts if with_demos else 0))
    mask = batch["loss_mask"]
    # an expert trace's <eos> is the expert's too: every token of a trace row is off-policy
    off_policy = prefix_mask(mask, [s.prefix + (not s.generate) for s in slots] + [0] * (len(mask) - n_seq))
    old_logp, ent, ref_logp = score(model, ref, batch, rl.micro_batch_size)
    adv = group_advantages(torch.tensor(rewards, dtype=torch.float32, device="cpu"), rl.std_norm).flatten()
    on_policy = mask[:n_seq] * ~off_policy[:n_seq]
    signals = {"entropy": float((ent[:n_seq] * on_policy).sum() / on_policy.sum().clamp_min(1.0)),
               "advantages": adv.numpy(), "seq_entropy": row_mean(ent[:n_seq], mask[:n_seq])}
    if mix.needs_demo_entropy:
        signals["demo_entropy"] = row_mean(ent[n_seq:], mask[n_seq:])
    plan = mix.loss_plan(rewards, signals)
    if plan.advantages is not None:
        adv = torch.as_tensor(plan.advantages, dtype=torch.float32, device="cpu")

    keep = np.concatenate([plan.rl_rows, plan.sft_weight > 0 if with_demos else np.zeros(0, bool)])
    # the per-token tensors below are staged on the CPU (where score() left the log-probs) and moved once, at the end
    idx = torch.as_tensor(np.flatnonzero(keep), device="cpu")
    is_rl = (idx < n_seq).unsqueeze(1)
    kept = mask[idx]
    w_rl, w_sft = torch.zeros_like(kept), torch.zeros_like(kept)
    rl_idx, sft_idx = idx[idx < n_seq], idx[idx >= n_seq]
    if len(rl_idx):
        w_rl[is_rl.squeeze(1)] = token_weights(mask[rl_idx], rl.loss_agg, max_len=rl.max_new_tokens)
    if len(sft_idx):
        per_prompt = torch.tensor(plan.sft_weight, dtype=torch.float32, device="cpu")[sft_idx - n_seq]
        w_sft[~is_rl.squeeze(1)] = mask[sft_idx] / mask[sft_idx].sum() * per_prompt.unsqueeze(1)
    scale = torch.ones(len(idx), device="cpu")
    scale[is_rl.squeeze(1)] = torch.tensor(plan.rl_scale, dtype=torch.float32, device="cpu")[rl_idx]
    beta = torch.full((len(idx),), float(rl.kl_coef), device="cpu")
    if kl_coef is not None:
        beta[is_rl.squeeze(1)] = torch.as_tensor(np.repeat(kl_coef, group), dtype=torch.float32,
                                                 device="cpu")[rl_idx]
    off = off_policy[idx] & is_rl
    adv_tok = torch.cat([adv, torch.zeros(len(mask) - n_seq, device="cpu")])[idx].unsqueeze(1) * is_rl
    adv_tok = adv_tok * advantage_kept(off, ent[idx], mix.off_policy_entropy_top)

    d = model_device(model)
    tokens = batch["attention_mask"].sum(1)
    shaped = off & (mix.off_policy_loss == "shaped")
    generated = torch.tensor([s.generate for s in slots] + [False] * (len(mask) - n_seq), device="cpu")
    return StepBatch(
        rows={k: batch[k][idx].to(d) for k in ("input_ids", "attention_mask", "labels")},
        rl_mask=(kept * is_rl).to(d), shaped=shaped.to(d) if bool(shaped.any()) else None,
        adv=adv_tok.to(d), w_pol=(w_rl * scale.unsqueeze(1)).to(d), w_kl=(w_rl * beta.unsqueeze(1)).to(d),
        w_sft=w_sft.to(d),
        old_logp=old_logp[idx].to(d), ref_logp=ref_logp[idx].to(d) if ref_logp is not None else None,
        lam=mix.lam, signals=signals, plan=plan, slots=slots, off_policy_tokens=int(off.sum()),
        rl_tokens=int((kept * is_rl).sum()), sft_tokens=int((w_sft > 0).sum()),
        generated_tokens=int(tokens[generated].sum()), trained_tokens=int(tokens[idx].sum()),
        tokens=int(tokens[generated].sum()) + int(tokens[idx][~generated[idx]].sum()),
        response_tokens=mask[:n_seq].sum(1).tolist())


def mixed_closure(model, opt, step: StepBatch, rl: RLConfig, micro_batch_size: int | None,
                  record: dict) -> Callable[[], torch.Tensor]:
    """The update rule's closure: zero the gradients, forward + backward the step's loss over the micro-batches,
    return the loss. Fills `record` with clip_frac and kl (of the latest pass) and sft_loss, the SFT term of the
    first pass (like StepStats.loss), as device scalars: the closure carries it as `closure.record`, and the rule's
    step reads them into numbers with its own."""
    slices = micro_slices(len(step.rows["input_ids"]), micro_batch_size)
    n_tokens = max(float(step.rl_tokens), 1.0)
    device = step.adv.device

    def closure() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        # the pass's numbers are summed on the device: the rule reads them with its own, once, after the update
        total = torch.zeros((), device=device)
        clipped, kl_sum, sft_sum = (torch.zeros((), dtype=torch.float64, device=device) for _ in range(3))
        for rows in slices:
            logp = token_logprobs(forward_logits(model, step.rows, rows), step.rows["labels"][rows])
            pl, was_clipped = mixed_token_loss(logp, step.old_logp[rows], step.adv[rows],
                                               step.shaped[rows] if step.shaped is not None else None,
                                               rl.clip_low, rl.clip_high, step.lam)
            sft = sft_loss(logp, step.w_sft[rows])
            loss = (pl * step.w_pol[rows]).sum() + sft
            if step.ref_logp is not None:
                kl = kl_k3(logp, step.ref_logp[rows])
                loss = loss + (kl * step.w_kl[rows]).sum()
                kl_sum += (kl.detach() * step.rl_mask[rows]).sum()
            loss.backward()
            total += loss.detach()
            sft_sum += sft.detach()
            clipped += (was_clipped * step.rl_mask[rows]).sum()
        record.update(clip_frac=clipped / n_tokens, kl=kl_sum / n_tokens if step.ref_logp is not None else None)
        record.setdefault("sft_loss", sft_sum)
        return total

    closure.record = record  # type: ignore[attr-defined]  # (UpdateRule.step reads it with the step's numbers)
    return closure


@torch.no_grad()
def score(model, ref, batch: dict[str, torch.Tensor], micro_batch_size: int | None):
    """The behaviour policy's log-probs (recomputed rather than taken from sampling), its token entropies and the
    reference model's log-probs (None without one), [B, T-1] each, on the CPU."""
    old, ent, ref_out = [], [], []
    labels = batch["labels"].to(model_device(model))
    for rows in micro_slices(len(batch["input_ids"]), micro_batch_size):
        logits = forward_logits(model, batch, rows)
        old.append(token_logprobs(logits, labels[rows]).cpu())
        ent.append(token_entropy(logits).cpu())
        if ref is not None:
            ref_out.append(token_logprobs(forward_logits(ref, batch, rows), labels[rows]).cpu())
    return torch.cat(old), torch.cat(ent), torch.cat(ref_out) if ref is not None else None
