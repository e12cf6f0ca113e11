"""Prefix-RFT (Huang et al., "Blending Supervised and Reinforcement Fine-Tuning with Prefix Sampling",
arXiv:2507.01679; official code ZeroYuHuang/prefix_rft). `n_prefixed` of each group's G rollouts start from a
prefix of the prompt's demonstration and continue on-policy; the rest are plain rollouts; advantages over the
group. The prefix is floor(l x demonstration tokens) with l drawn uniformly from [min_frac, upper], the upper bound
decaying from max_frac to min_frac along a cosine over training (the paper's cosine prefix scheduler: long
prefixes early, short ones late). Prefix tokens are off-policy: trained with the clipped ratio against the policy's
own probability at rollout time, and only the top `entropy_top` share of them by policy entropy keep their
advantage (the official code's entropy mask; the rest get advantage 0)."""

from __future__ import annotations

import math

import numpy as np

from workflow.algos.mix import ON_POLICY, LossPlan, MixedPolicy, Slot


class PrefixRFT(MixedPolicy):
    off_policy_loss = "clip"

    def __init__(self, n_prefixed: int = 1, min_frac: float = 0.05, max_frac: float = 0.95,
                 entropy_top: float = 0.2):
        self.n_prefixed, self.min_frac, self.max_frac = n_prefixed, min_frac, max_frac
        self.off_policy_entropy_top = entropy_top
        self.last_prefix: list[int] = []  # prefixes drawn since the last loss_plan (verl draws prompt by prompt)

    def upper(self, progress: float) -> float:
        """The prefix fraction's upper bound after `progress` (0..1) of training: max_frac -> min_frac, cosine."""
        return self.min_frac + (self.max_frac - self.min_frac) * 0.5 * (1.0 + math.cos(math.pi * progress))

    def rollout_slots(self, demo_lens, group_size, rng, progress=0.0):
        if self.n_prefixed >= group_size:
            raise ValueError(f"Prefix-RFT's n_prefixed ({self.n_prefixed}) must be < the group size ({group_size})")
        frac = rng.uniform(self.min_frac, self.upper(progress), size=(len(demo_lens), self.n_prefixed))
        prefixes = [[int(math.floor(f * n)) for f in row] for row, n in zip(frac, demo_lens)]
        self.last_prefix += [k for row in prefixes for k in row]
        return [[ON_POLICY] * (group_size - self.n_prefixed) + [Slot(prefix=k) for k in row] for row in prefixes]

    def loss_plan(self, rewards: np.ndarray, signals) -> LossPlan:
        plan = LossPlan.on_policy(*rewards.shape)
        plan.metrics["prefix_len"] = float(np.mean(self.last_prefix)) if self.last_prefix else 0.0
        self.last_prefix = []
        return plan
