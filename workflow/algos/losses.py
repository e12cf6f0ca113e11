"""Losses written so that micro-batching never changes the gradient.

Every loss here is `sum(per_token_loss * weight)`, with the per-token weights computed ONCE over the whole batch
(`token_weights`). A micro-batch contributes the sum over its own tokens, so the accumulated gradient is exactly
the full-batch gradient for any split. The classic bug this avoids (Limozin et al., "SFT-then-RL Outperforms
Mixed-Policy Methods for LLM Reasoning", arXiv:2604.23747) is averaging per-micro-batch means, which over-weights
tokens of short micro-batches.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

LossAgg = Literal["token-mean", "seq-mean-token-mean", "token-sum"]


def token_weights(mask: torch.Tensor, mode: LossAgg, max_len: int | None = None) -> torch.Tensor:
    """Per-token weights [B, T] for a batch whose loss tokens are `mask` [B, T].

    token-mean           every token of the batch counts equally: 1 / N_tokens (DAPO; also the SFT loss)
    seq-mean-token-mean  mean over sequences of each sequence's token mean: 1 / (len_i * N_seqs) (original GRPO)
    token-sum            sum over tokens divided by a constant N_seqs * max_len, no length normalisation (Dr.GRPO)
    """
    mask = mask.to(torch.float32)
    if mode == "token-mean":
        return mask / mask.sum().clamp_min(1.0)
    n_seqs = mask.shape[0]
    if mode == "seq-mean-token-mean":
        return mask / (mask.sum(dim=1, keepdim=True).clamp_min(1.0) * n_seqs)
    if mode == "token-sum":
        if max_len is None:
            raise ValueError("token-sum aggregation needs max_len (the constant normaliser)")
        return mask / float(n_seqs * max_len)
    raise ValueError(f"unknown loss aggregation {mode!r}")


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) per position; logits [B, T, V] already aligned with targets [B, T]."""
    return torch.gather(F.log_softmax(logits.float(), dim=-1), -1, targets.unsqueeze(-1)).squeeze(-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = F.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def sft_loss(logp: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood of the target tokens, weighted (weights = token_weights(mask, 'token-mean'))."""
    return -(logp * weights).sum()


def group_advantages(rewards: torch.Tensor, std_norm: bool, eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantages for rewards [P, G]: reward minus its group mean, divided by the group std if std_norm
    (Dr.GRPO sets std_norm=False). Groups where every reward is equal get advantage 0."""
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if std_norm:
        centred = centred / (rewards.std(dim=1, keepdim=True, unbiased=True) + eps)
    return centred


def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                        clip_low: float, clip_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO-clip loss -min(rA, clip(r, 1-clip_low, 1+clip_high)A) and whether the clip was active.

    adv is per sequence [B] (broadcast over tokens) or per token [B, T]."""
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    loss = -torch.minimum(unclipped, clipped)
    return loss, (clipped < unclipped)


def shaped_off_policy_loss(logp: torch.Tensor, adv: torch.Tensor, lam: float) -> torch.Tensor:
    """Per-token loss of an off-policy (expert) token under LUFFY's policy shaping: -f(pi) A with
    f(pi) = pi / (pi + lam), pi = exp(logp) the current policy's probability of the expert's token. The behaviour
    policy's probability is taken as 1 (the expert's token was given, not sampled from us) and nothing is clipped.

    Its gradient is -A lam pi / (pi + lam)^2 grad log pi: tokens the policy already finds likely, and very unlikely
    ones, are damped; tokens near pi = lam get the largest push (Yan et al., "Learning to Reason under Off-Policy
    Guidance", arXiv:2504.14945, Section 3.3). adv is per sequence [B] or per token [B, T]."""
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    p = torch.exp(logp)
    return -(p / (p + lam)) * adv


def mixed_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, off_policy: torch.Tensor | None,
                     clip_low: float, clip_high: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-token RL loss of a batch that mixes on-policy and expert tokens (workflow/algos/mix.py): the clipped
    PPO loss where `off_policy` [B, T] is false, LUFFY's shaped loss where it is true. Returns the loss and where
    the clip was active (on-policy tokens only). Without off-policy tokens (`off_policy` None: the caller knows it
    without asking the device) this is exactly clipped_policy_loss."""
    loss, clipped = clipped_policy_loss(logp, old_logp, adv, clip_low, clip_high)
    if off_policy is None:
        return loss, clipped
    return torch.where(off_policy, shaped_off_policy_loss(logp, adv, lam), loss), clipped & ~off_policy


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's low-variance, non-negative estimator of KL(pi || ref) per token: e^(ref-logp) - (ref-logp) - 1."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0
