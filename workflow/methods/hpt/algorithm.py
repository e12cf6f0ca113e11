"""HPT (Lv et al., "Towards a Unified View of Large Language Model Post-Training", arXiv:2509.04419): a switch per
prompt. When at most `threshold` of the prompt's rollouts are correct (default 0: all wrong) the prompt is trained
with the SFT loss on its demonstration (its rollouts leave the RL loss: with every reward equal their GRPO
advantage is 0 anyway, so they would only dilute the token mean); otherwise with the GRPO loss on its rollouts."""

from __future__ import annotations

import numpy as np

from workflow.algos.mix import LossPlan, MixedPolicy


class HPT(MixedPolicy):
    trains_on_demonstrations = True

    def __init__(self, threshold: int = 0, sft_coef: float = 1.0):
        self.threshold, self.sft_coef = threshold, sft_coef

    def loss_plan(self, rewards: np.ndarray, signals) -> LossPlan:
        n_prompts, group_size = rewards.shape
        to_sft = (rewards > 0).sum(axis=1) <= self.threshold  # [P]: the prompt's correct rollouts <= threshold
        plan = LossPlan.on_policy(n_prompts, group_size)
        plan.rl_rows = np.repeat(~to_sft, group_size)
        plan.sft_weight = np.where(to_sft, self.sft_coef, 0.0)
        plan.metrics["sft_prompt_frac"] = float(to_sft.mean())
        return plan
