"""The batch the integrity preflight of a mixed-policy RL stage on verl trains on (torchrun/preflight.py's MixRunner,
in the torchrun child): one step's rows as the driver hands them to the workers (mix_hooks.DriverMix.plan), from the job's own prompts and
demonstrations and its own method, but without generating (the preflight must not start vLLM). Plain torch and
numpy, no verl import.

How the rows stand in for a step, and why that is enough: the preflight checks that the loss of a batch is a fixed
weighted sum over its tokens (the same gradient for any micro-batch split or rank count) and that the optimizer
applies all of it; what the tokens ARE does not enter either property, the weights and which loss each token takes
do. So every sequence of a group is drawn from the prompt's demonstration (tokenised as the driver does, + eos, cut
at rl.max_new_tokens): an expert-trace slot is the whole trace, a prefixed slot (Prefix-RFT) its first k tokens
off-policy and more of it as the "continuation", a rollout a cut of it (cuts of unequal length, so that micro-batches
hold unequal token counts: what a mean of per-micro-batch means re-weights). Rewards: prompts alternate between a
group that solved nothing (HPT switches it to SFT) and one that half solved it; an expert trace scores 1.
Advantages are verl's GRPO over the mixed groups; the method's plan, the demonstration rows for its SFT term and the
per-token weights come from the same functions as the driver's (mix_batch.py). Old log-probs are 0 (the importance
ratio is then pi itself): which tokens the clip zeroes does not change how the loss aggregates. A method whose own
addition to GRPO is an interleaved SFT step (ReLIFT) is probed on that step's batch: demonstration rows, one
token-mean SFT loss (mix_batch.sft_weights).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from workflow.algos.losses import group_advantages
from workflow.algos.mix import MixedPolicy
from workflow.config import RLConfig
from workflow.algos.mix_batch import (StepRows, demo_positions, loss_plan, padded, prefix_len, prompt_slots,
                                             sequence_fields, sft_weights, token_fields, trace_response)
from workflow.engines.verl.contract import KL_COEF, SHAPED, W_KL, W_RL, W_SFT

STEP = 1  # the step whose slots the probe draws (Prefix-RFT's schedule: its longest prefixes)


def _row(prompt: list[int], response: list[int]) -> dict[str, torch.Tensor]:
    row = sequence_fields(torch.tensor(prompt, dtype=torch.int64, device="cpu"), response)
    row["prompts"] = torch.tensor(prompt, dtype=torch.int64, device="cpu")
    return row


def _finish(rows: list[dict], weights: dict[str, list[torch.Tensor]], advantages: list[torch.Tensor],
            kl: bool) -> list[dict]:
    """The per-token fields the workers' loss reads (mix_loss.py), at each row's response length."""
    for i, row in enumerate(rows):
        n = len(row["responses"])
        row.update({name: w[i][:n].float() for name, w in weights.items()})
        row["advantages"] = advantages[i][:n].float()
        row["old_log_probs"] = torch.zeros(n, device="cpu")
        if kl:  # the KL term's reference: 0, like the old log-probs
            row["ref_log_prob"] = torch.zeros(n, device="cpu")
    return rows


def interleaved_rows(rl: RLConfig, prompts: list[list[int]], demos: list[list[int]], eos: int,
                     kl: bool) -> list[dict]:
    """An interleaved SFT step's batch (ReLIFT): one demonstration row per prompt, token-mean SFT weights."""
    rows = [_row(p, trace_response(d, eos, rl.max_new_tokens)[0]) for p, d in zip(prompts, demos)]
    w_sft = sft_weights([r["response_mask"] for r in rows], len(rows))
    zeros = [torch.zeros_like(w) for w in w_sft]
    return _finish(rows, {W_SFT: w_sft, W_RL: zeros, W_KL: zeros, SHAPED: zeros, KL_COEF: zeros}, zeros, kl)


def step_rows(rl: RLConfig, mix: MixedPolicy, prompts: list[list[int]], demos: list[list[int]], indexes: list[int],
              eos: int, seed: int, kl: bool) -> list[dict]:
    """P x G planned rows (row p * G + g: prompt p's session g), every field the workers' mixed loss reads."""
    G = rl.group_size
    traces = [trace_response(d, eos, rl.max_new_tokens)[0] for d in demos]
    responses, slots, off_len, rewards = [], [], [], np.zeros((len(prompts), G))
    for p, (trace, demo, index) in enumerate(zip(traces, demos, indexes)):
        for g, slot in enumerate(prompt_slots(mix, G, rl.steps, len(demo), seed, STEP, index)):
            if not slot.generate:
                response, k, rewards[p, g] = trace, len(trace), 1.0
            else:
                k = prefix_len(slot, rl.max_new_tokens) if slot.prefix else 0
                cut = max(1, math.ceil(len(trace) * (g + 1) / G))
                response = trace[: max(cut, min(k + 1, len(trace)))]
                rewards[p, g] = float(p % 2 == 1 and g % 2 == 0)
            responses.append(response)
            slots.append(slot)
            off_len.append(k)
    groups = [list(range(p * G, (p + 1) * G)) for p in range(len(prompts))]
    advantage = group_advantages(torch.as_tensor(rewards, device="cpu"), rl.std_norm).reshape(-1).numpy()
    rng = np.random.default_rng([seed, 4])
    entropy = [torch.as_tensor(rng.uniform(0.5, 2.0, len(r)), dtype=torch.float32, device="cpu") for r in responses]

    def step(masks, off, entropies) -> StepRows:
        return StepRows(groups=groups, reward=rewards.reshape(-1), mask=padded(masks), off=padded(off, torch.bool),
                        entropy=padded(entropies), advantage=advantage, slots=slots)

    masks = [torch.ones(len(r), device="cpu") for r in responses]
    off = [torch.arange(len(r), device="cpu") < k for r, k in zip(responses, off_len)]
    plan, _ = loss_plan(mix, step(masks, off, entropy))
    demo_rows = demo_positions(plan, step(masks, off, entropy))
    for p, pos in demo_rows.items():  # an SFT-only row in place of a rollout the RL loss does not use (HPT)
        if slots[pos].generate:
            responses[pos] = traces[p]
            masks[pos] = torch.ones(len(traces[p]), device="cpu")
            off[pos] = torch.zeros(len(traces[p]), dtype=torch.bool, device="cpu")
            entropy[pos] = torch.zeros(len(traces[p]), device="cpu")
    tokens = token_fields(mix, plan, step(masks, off, entropy), demo_rows, rl.loss_agg, rl.max_new_tokens,
                          rl.kl_coef)
    rows = [_row(prompts[i // G], r) for i, r in enumerate(responses)]
    weights = {W_RL: list(tokens.w_rl), W_KL: list(tokens.w_kl), W_SFT: list(tokens.w_sft),
               SHAPED: list(tokens.shaped), KL_COEF: list(tokens.kl_coef)}
    return _finish(rows, weights, list(tokens.advantages), kl)


def stage_rows(stage, model_path: str, data, ranks: int, micro: int) -> list[dict]:
    """The probe's rows for an RL stage (its own model's tokenizer, its first training prompts, reused when a small
    run has fewer): per rank two of the job's micro-batches (no more than the job's share, at least 2 rows), rounded
    up to whole groups and whole micro-batches."""
    from transformers import AutoTokenizer
    from workflow.methods.registry import build_mix
    from workflow.engines.verl.job.data import rl_rows
    rl, mix = stage.rl, build_mix(stage.rl)
    group = 1 if mix.interleaves_sft else rl.group_size  # one demonstration row per prompt in an SFT step
    share = rl.prompts_per_step * rl.group_size // (stage.engine.verl.n_gpus_per_node * stage.engine.verl.nnodes)
    per_rank = max(2, min(share, 2 * micro))
    while (per_rank * ranks) % group or per_rank % micro:
        per_rank += 1
    n_prompts = per_rank * ranks // group
    source = rl_rows(stage, data)[:n_prompts]
    if not source:
        raise ValueError("the integrity preflight found no training prompts in the job's data")
    source = [source[i % len(source)] for i in range(n_prompts)]  # a small run's prompts, reused to fill the batch
    tok = AutoTokenizer.from_pretrained(model_path)
    prompts = [tok.encode(tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False),
                          add_special_tokens=False) for r in source]
    demos = [tok.encode(r["extra_info"]["demo"], add_special_tokens=False) for r in source]
    kl = rl.kl_coef > 0
    if mix.interleaves_sft:
        return interleaved_rows(rl, prompts, demos, tok.eos_token_id, kl)
    return step_rows(rl, mix, prompts, demos, [int(r["extra_info"]["index"]) for r in source], tok.eos_token_id,
                     stage.seed, kl)
