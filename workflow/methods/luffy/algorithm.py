"""LUFFY (Yan et al., "Learning to Reason under Off-Policy Guidance", arXiv:2504.14945): each group's last n_off
sequences are the prompt's expert trace instead of rollouts; advantages are computed over the mixed group (the
engine's group advantages, so the trace, usually correct, lifts the bar the rollouts are measured against); the
trace's tokens are trained with the shaped loss -f(pi) A, f(pi) = pi / (pi + lam), unclipped, the rollouts' with
the usual clipped ratio (workflow/algos/losses.py)."""

from __future__ import annotations

import numpy as np

from workflow.algos.mix import ON_POLICY, LossPlan, MixedPolicy, Slot


class LUFFY(MixedPolicy):
    def __init__(self, n_off: int = 1, lam: float = 0.1):
        self.n_off, self.lam = n_off, lam

    def rollout_slots(self, demo_lens, group_size, rng, progress=0.0):
        if self.n_off >= group_size:
            raise ValueError(f"LUFFY's n_off ({self.n_off}) must be < the group size ({group_size})")
        return [[ON_POLICY] * (group_size - self.n_off) + [Slot(prefix=n, generate=False)] * self.n_off
                for n in demo_lens]

    def loss_plan(self, rewards: np.ndarray, signals) -> LossPlan:
        plan = LossPlan.on_policy(*rewards.shape)
        plan.metrics["trace_reward"] = float(rewards[:, -self.n_off:].mean())  # a wrong trace would show here
        return plan
