"""SRFT (Fu et al., "SRFT: A Single-Stage Method with Supervised and Reinforcement Fine-Tuning for Reasoning",
arXiv:2506.19767, Eq. 8 and the self-rollout objective). One batch, four terms:

    demonstration, SFT     w_SFT x token-mean NLL,   w_SFT = sft_coef x sg(exp(-H_demo))      (sft_coef: 0.5)
    demonstration, RL      the trace is one of the group's G sequences (advantages over the mixed group), trained
                           with LUFFY's shaped off-policy loss -f(pi) A
    correct rollouts       advantage +w_RL,          w_RL = rl_coef x sg(exp(+H_seq))          (rl_coef: 0.1)
    wrong rollouts         advantage -1

H_demo is the policy's mean token entropy on the demonstration, H_seq on the rollout, both detached. The two
rollout terms are the paper's w_RL x (-log pi(y+)) and +log pi(y-): written as advantages of the clipped ratio
loss, whose gradient at the rollout policy (ratio 1) is exactly -A grad log pi, so a single-pass rule trains the
paper's objective. (The HPT authors' re-implementation, TsinghuaC3I/Unify-Post-Training, reads the paper the same
way; the SRFT code reportedly uses exp(+H) for w_SFT, contradicting the paper: we follow the paper.)"""

from __future__ import annotations

import numpy as np

from workflow.algos.mix import ON_POLICY, LossPlan, MixedPolicy, Slot


class SRFT(MixedPolicy):
    trains_on_demonstrations = True
    needs_demo_entropy = True

    def __init__(self, sft_coef: float = 0.5, rl_coef: float = 0.1, lam: float = 0.1):
        self.sft_coef, self.rl_coef, self.lam = sft_coef, rl_coef, lam

    def rollout_slots(self, demo_lens, group_size, rng, progress=0.0):
        return [[ON_POLICY] * (group_size - 1) + [Slot(prefix=n, generate=False)] for n in demo_lens]

    def loss_plan(self, rewards: np.ndarray, signals) -> LossPlan:
        n_prompts, group_size = rewards.shape
        plan = LossPlan.on_policy(n_prompts, group_size)
        plan.sft_weight = self.sft_coef * np.exp(-np.asarray(signals["demo_entropy"], dtype=float))
        correct = rewards.flatten() > 0
        w_rl = self.rl_coef * np.exp(np.asarray(signals["seq_entropy"], dtype=float))
        trace = np.tile(np.arange(group_size) == group_size - 1, n_prompts)
        plan.advantages = np.where(trace, signals["advantages"], np.where(correct, w_rl, -1.0))
        plan.metrics["rl_weight"] = float(w_rl[correct & ~trace].mean()) if (correct & ~trace).any() else None
        return plan
