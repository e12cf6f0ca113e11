"""A mixed-policy method (workflow/algos/mix.py) on verl's step batch, on the driver: what the local engine's
rl_batch.build_step_batch does, for the rows verl keeps in its TransferQueue. Plain torch and numpy, no verl import
(mix_hooks.py moves the rows in and out of verl; this module decides what they hold).

verl samples every prompt's `rollout.n` = G sequences itself; a method's slots are applied AFTER generation:

- an expert-trace slot (Slot(prefix=len(demo), generate=False)) replaces the generated rollout of that session
  with the prompt's demonstration (tokenised with the actor's tokenizer, + eos like a finished response; cut at
  max_new_tokens like a rollout), scored by the run's reward like any response. Its tokens are off-policy.
- a prompt the plan trains with SFT but whose group has no trace row (HPT: its rollouts left the RL loss) gets one
  of its rollouts replaced by the demonstration after the plan, as an SFT-only row. verl's batch keeps P x G rows.
- a prefixed slot (Prefix-RFT: Slot(prefix=k, generate=True)) cannot be applied after generation: verl's agent
  loop draws it itself (workflow/methods/prefix_rft/verl.py) and continues prompt + the demonstration's first k
  tokens. Agent loop and driver draw a prompt's slots alike, from its dataset index and the step it was sampled at
  (prompt_slots).
- an interleaved SFT step (ReLIFT) is a batch of its own after the RL update: demonstration rows built on a row of
  the step as template (demonstration_row), every token weighted 1 / (SFT tokens of that batch) (sft_weights).

Every per-token weight is computed here ONCE over the whole step batch (verl's one mini-batch: translate.py sets
ppo_mini_batch_size = train_batch_size, ppo_epochs 1), so the worker's loss (mix_loss.py) is a plain weighted sum
that no micro-batch split or data-parallel layout changes.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from workflow.algos.losses import token_weights
from workflow.algos.mix import LossPlan, MixedPolicy, Slot, step_columns


def group_positions(keys: list[str]) -> list[list[int]]:
    """Positions of verl's batch rows grouped by prompt ([P][G]), prompts in order of first appearance, each group
    in session order. verl's TransferQueue keys are `{uid}_{session}_{turn}` (agent_loop_tq.py); uids are uuid4s
    (no underscore)."""
    groups: dict[str, list[tuple[int, int, int]]] = {}
    for pos, key in enumerate(keys):
        uid, session, turn = key.rsplit("_", 2)
        groups.setdefault(uid, []).append((int(session), int(turn), pos))
    return [[pos for _, _, pos in sorted(rows)] for rows in groups.values()]


def prompt_slots(mix: MixedPolicy, group_size: int, total_steps: int, demo_len: int, seed: int, step: int,
                 index: int) -> list[Slot]:
    """One prompt's G slots at `step` (1-based, verl's global step), drawn from a generator of its own (the run's
    seed, the step, the prompt's dataset index): the same wherever they are drawn, so that verl's agent loop (which
    sees one prompt) and the driver (which sees the batch) agree on which sessions continue which prefix."""
    rng = np.random.default_rng([seed, step, 3, index])
    return mix.rollout_slots([demo_len], group_size, rng, progress=(step - 1) / total_steps)[0]


def prefix_len(slot: Slot, response_length: int) -> int:
    """How many demonstration tokens a prefixed rollout starts with: the slot's prefix, cut at the response length
    (verl's responses are at most rollout.response_length tokens; the continuation gets what is left, at least
    one token)."""
    return min(slot.prefix, response_length)


def prompt_uid(key: str) -> str:
    """The prompt (uid) of a TransferQueue key `{uid}_{session}_{turn}`."""
    return key.rsplit("_", 2)[0]


def by_group(values, groups: list[list[int]]) -> np.ndarray:
    """Per-position values -> [P, G] in group order."""
    return np.asarray([[values[pos] for pos in g] for g in groups])


def user_text(messages) -> str:
    """The text of a prompt's (last) user turn: what a FAST-GRPO difficulty table is keyed by, as on the local
    engine (the problem's prompt without the chat markup)."""
    turns = [m for m in list(messages) if m.get("role") == "user"]
    return str(turns[-1]["content"]) if turns else ""


def trace_response(demo: list[int], eos: int, max_len: int) -> tuple[list[int], int]:
    """A demonstration as a response: its tokens + eos, cut at max_len like a rollout. Returns the tokens and how
    many of them are the expert's: all of them, its eos included (as on the local engine, rl_batch)."""
    tokens = (list(demo) + [eos])[:max_len]
    return tokens, len(tokens)


def sequence_fields(prompt: torch.Tensor, response: list[int]) -> dict[str, torch.Tensor]:
    """One sequence's per-sample fields as verl's agent loop writes them (text-only: positions 0..n-1), for a row
    whose response is replaced."""
    responses = torch.tensor(response, dtype=torch.int64, device="cpu")
    input_ids = torch.cat([prompt.to(torch.int64), responses])
    ones = torch.ones_like(responses)
    return {"responses": responses, "response_mask": ones, "loss_mask": ones.clone(), "input_ids": input_ids,
            "position_ids": torch.arange(len(input_ids), dtype=torch.int64, device="cpu")}


def demonstration_row(template: dict, prompt: torch.Tensor, response: list[int]) -> dict:
    """A whole row of verl's batch (every field `template`, a row of the step, has) holding prompt + demonstration:
    the sequence fields rebuilt; every other per-token field, over the response (old_log_probs, advantages, ...) or
    over the whole sequence (the log-probs verl's forward left), zeros of the new length; the rest (uid,
    extra_info, data_source, ...) copied. An SFT-only row: whatever it carries for the RL loss is 0, its weights
    come from sft_weights."""
    sequence = sequence_fields(prompt, response)
    sequence["prompts"] = prompt.to(torch.int64)
    sequence["attention_mask"] = torch.ones_like(sequence["input_ids"])
    lengths = {len(template["responses"]): len(response), len(template["input_ids"]): len(sequence["input_ids"])}
    row = {}
    for name, value in template.items():
        if name in sequence:
            row[name] = sequence[name]
        elif isinstance(value, torch.Tensor) and value.dim() >= 1 and len(value) in lengths:
            row[name] = torch.zeros((lengths[len(value)], *value.shape[1:]), dtype=value.dtype, device="cpu")
        else:
            row[name] = value.clone() if isinstance(value, torch.Tensor) else copy.deepcopy(value)
    return row


def sft_weights(masks: list[torch.Tensor], trained: int) -> list[torch.Tensor]:
    """Per-token weights of a batch of demonstration rows: 1 / (SFT tokens of the first `trained` rows) on those
    rows' response tokens (a global token mean), 0 on the rest (padding to a multiple of the data-parallel size)."""
    total = max(float(sum(m.float().sum() for m in masks[:trained])), 1.0)
    return [m.float() / total if i < trained else torch.zeros(len(m), device="cpu") for i, m in enumerate(masks)]


def padded(rows: list[torch.Tensor], dtype=torch.float32) -> torch.Tensor:
    """Per-row 1-d tensors -> [N, T], right-padded with 0."""
    width = max((len(r) for r in rows), default=0)
    out = torch.zeros((len(rows), width), dtype=dtype, device="cpu")
    for i, r in enumerate(rows):
        out[i, : len(r)] = r.to(dtype)
    return out


@dataclass
class StepRows:
    """The step's rows in verl's batch order, as the driver read them: groups [P][G] of positions, per row its
    reward, response mask [N, T], off-policy (expert) tokens [N, T], the policy's token entropy [N, T] and its group
    advantage (verl's GRPO over the mixed group), and which rows the policy generated."""

    groups: list[list[int]]
    reward: np.ndarray
    mask: torch.Tensor
    off: torch.Tensor
    entropy: torch.Tensor
    advantage: np.ndarray
    slots: list[Slot]  # per position

    def by_group(self, values: np.ndarray) -> np.ndarray:
        """Per-position values -> [P, G] in group order (the method's view: row p * G + g)."""
        return by_group(values, self.groups)

    @property
    def order(self) -> np.ndarray:
        """Position of the method's row p * G + g."""
        return np.asarray([pos for g in self.groups for pos in g])


def loss_plan(mix: MixedPolicy, rows: StepRows) -> tuple[LossPlan, dict]:
    """The method's plan from what the rollout measured (the signals of workflow/algos/mix.py, computed as the
    local engine computes them); the trace row of each group (if any) stands for its demonstration."""
    order = rows.order
    on_policy = rows.mask * ~rows.off
    signals = {"entropy": float((rows.entropy * on_policy).sum() / on_policy.sum().clamp_min(1.0)),
               "advantages": rows.advantage[order], "seq_entropy": row_mean(rows.entropy, rows.mask)[order]}
    if mix.needs_demo_entropy:
        traces = trace_positions(rows)
        if any(t is None for t in traces):
            raise ValueError(f"{mix.name} reads the policy's entropy on each demonstration, but a group has no "
                             "expert-trace row")
        signals["demo_entropy"] = row_mean(rows.entropy, rows.mask)[traces]
    return mix.loss_plan(rows.by_group(rows.reward), signals), signals


def trace_positions(rows: StepRows) -> list[int | None]:
    """Per prompt, the position of its (first) full expert-trace row, None without one."""
    return [next((pos for pos in g if not rows.slots[pos].generate), None) for g in rows.groups]


def demo_positions(plan: LossPlan, rows: StepRows) -> dict[int, int]:
    """prompt -> the row that carries its demonstration for the SFT term, for every prompt the plan trains on:
    its expert-trace row, else its last rollout (which must be out of the RL loss: it is replaced, mix_hooks.py)."""
    out, traces = {}, trace_positions(rows)
    rl_rows = np.asarray(plan.rl_rows, bool)
    for p in np.flatnonzero(np.asarray(plan.sft_weight) > 0):
        if traces[p] is not None:
            out[int(p)] = traces[p]
            continue
        g = len(rows.groups[p]) - 1
        if rl_rows[p * len(rows.groups[p]) + g]:
            raise ValueError("the plan trains a prompt with SFT while all its rollouts stay in the RL loss: verl "
                             "keeps P x G rows, so the demonstration needs a row the RL loss does not use")
        out[int(p)] = rows.groups[p][g]
    return out


@dataclass
class MixTokens:
    """The per-token fields the worker's loss reads (mix_loss.py), [N, T] in batch order, and the step's metrics."""

    w_rl: torch.Tensor  # rl.loss_agg weights over the RL rows x the plan's rl_scale (0 elsewhere)
    w_kl: torch.Tensor  # the same without rl_scale (the KL penalty's)
    kl_coef: torch.Tensor  # the KL penalty's coefficient of each row (rl.kl_coef, or its group's under dynamic_kl)
    w_sft: torch.Tensor  # sft_weight[prompt] / SFT tokens of the batch on demonstration rows
    shaped: torch.Tensor  # 1.0: off-policy token trained with the shaped loss -f(pi) A
    advantages: torch.Tensor  # per-token advantage (the plan's; 0 where the method leaves a token out)
    metrics: dict = field(default_factory=dict)


def token_fields(mix: MixedPolicy, plan: LossPlan, rows: StepRows, demos: dict[int, int], loss_agg: str,
                 max_len: int, kl_coef: float | np.ndarray) -> MixTokens:
    """rl_batch.build_step_batch's weights for verl's rows. `rows` as they are after the demonstration rows were
    put in place (their mask covers the demonstration; an SFT-only row's off mask is all 0). `kl_coef`: the KL
    penalty's coefficient, one for the batch or one per row (batch order)."""
    order = rows.order
    rl_pos = order[np.asarray(plan.rl_rows, bool)]
    is_rl = torch.zeros(len(rows.mask), dtype=torch.bool, device="cpu")
    is_rl[torch.as_tensor(rl_pos, dtype=torch.long, device="cpu")] = True
    mask = rows.mask
    w_rl = torch.zeros_like(mask)
    if len(rl_pos):
        w_rl[is_rl] = token_weights(mask[is_rl], loss_agg, max_len=max_len)
    scale = torch.ones(len(mask), device="cpu")
    scale[torch.as_tensor(order, device="cpu")] = torch.as_tensor(np.asarray(plan.rl_scale, float), dtype=torch.float32,
                                                                  device="cpu")
    w_sft = torch.zeros_like(mask)
    if demos:
        sft_pos = torch.as_tensor(list(demos.values()), dtype=torch.long, device="cpu")
        per_prompt = torch.as_tensor([float(plan.sft_weight[p]) for p in demos], dtype=torch.float32, device="cpu")
        w_sft[sft_pos] = mask[sft_pos] / mask[sft_pos].sum().clamp_min(1.0) * per_prompt.unsqueeze(1)
    adv_rows = rows.advantage.copy()
    if plan.advantages is not None:
        adv_rows[order] = np.asarray(plan.advantages, float)
    off = rows.off & is_rl.unsqueeze(1)
    adv = torch.as_tensor(adv_rows, dtype=torch.float32, device="cpu").unsqueeze(1) * mask * is_rl.unsqueeze(1)
    adv = adv * advantage_kept(off, rows.entropy, mix.off_policy_entropy_top)
    metrics = mix_metrics(plan, rows, is_rl, off, w_sft)
    beta = torch.as_tensor(np.broadcast_to(np.asarray(kl_coef, float), (len(mask),)).copy(), dtype=torch.float32,
                           device="cpu")
    return MixTokens(w_rl=w_rl * scale.unsqueeze(1), w_kl=w_rl, kl_coef=beta.unsqueeze(1) * mask, w_sft=w_sft,
                     shaped=(off & (mix.off_policy_loss == "shaped")).float(), advantages=adv, metrics=metrics)


def mix_metrics(plan: LossPlan, rows: StepRows, is_rl: torch.Tensor, off: torch.Tensor, w_sft: torch.Tensor) -> dict:
    """The driver's share of the mixed-policy columns (docs/methods.md; sft_loss and sft_loss_share come from the
    workers' loss)."""
    return step_columns(plan, float((rows.mask * is_rl.unsqueeze(1)).sum()), float(off.sum()),
                        float((w_sft > 0).sum()))


def rollout_metrics(rows: StepRows) -> dict:
    """reward, response length and rollout count of the policy's own sequences (not the expert traces), as on the
    local engine (StepBatch.rollout_metrics); read before any rollout is replaced by a demonstration."""
    sampled = [i for i, s in enumerate(rows.slots) if s.generate]
    if not sampled:
        return {"rollouts": 0}
    return {"reward": float(rows.reward[sampled].mean()), "rollouts": len(sampled),
            "response_len": float(rows.mask[sampled].sum(1).mean())}


def row_mean(values: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
    """Each row's mean of `values` over its `mask`ed tokens (0 for a row without any)."""
    return ((values * mask).sum(1) / mask.sum(1).clamp_min(1.0)).numpy()


def advantage_kept(off_policy: torch.Tensor, entropy: torch.Tensor, top: float | None) -> torch.Tensor:
    """[B, T] 1.0 where a token keeps its advantage: every on-policy token, and the off-policy tokens among the
    `top` share of the batch's off-policy tokens by policy entropy (all of them when top is None). Decided over the
    whole batch, so micro-batching cannot change which tokens train."""
    keep = torch.ones_like(entropy)
    if top is None or not bool(off_policy.any()):
        return keep
    values = entropy[off_policy]
    threshold = torch.topk(values, max(1, int(math.ceil(top * len(values))))).values[-1]
    keep[off_policy & (entropy < threshold)] = 0.0
    return keep
