"""Slow-Fast Policy Optimization: K fast steps, reposition theta0 + alpha (thetaK - theta0), one slow step
(K + 1 backward passes). Its entropy trigger (z >= tau against a window of past rollout entropies) switches it to
plain GRPO for good."""

from __future__ import annotations

import torch

from workflow.algos.gates import ZGate
from workflow.algos.rule import MultiPassRule, StepStats
from workflow.algos.sharded import clip_and_step, local, process_group, with_grad


class SFPO(MultiPassRule):
    """alpha = 0 means no reposition at all, which is exactly GRPOStep (the K fast steps could not move the slow
    weights), so it runs as GRPOStep: the same parameters bit for bit, 1 pass."""

    rollout_signals = ("entropy",)
    gate_phase, gate_signal = "rollout", "entropy"  # a NaN entropy trips the trigger, as it should

    def __init__(self, K: int, alpha: float, window: int = 30, tau: float = 1.0, max_grad_norm: float | None = 1.0,
                 gate_here: bool = True):
        super().__init__(max_grad_norm, gate_here)
        if K < 1:
            raise ValueError(f"SFPO needs K >= 1, got {K}")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        self.K, self.alpha = K, alpha
        if gate_here:
            self.gate = ZGate(window, tau, warmup=window, inclusive=True)  # the paper's trigger is z >= tau

    def moves(self) -> bool:
        return self.alpha != 0.0

    def multi_pass(self, params, optimizer, closure) -> StepStats:
        group = process_group(params)
        loss = closure().detach()  # fast step 1; gradients tell which parameters take part
        active = with_grad(params)
        with torch.no_grad():
            theta0 = self.snapshot("theta0", [local(p).detach() for p in active])  # the only extra copy: 1x
        norm, _ = clip_and_step(params, optimizer, self.max_grad_norm, group)
        for _ in range(self.K - 1):
            closure()
            clip_and_step(params, optimizer, self.max_grad_norm, group)
        with torch.no_grad():  # theta <- theta0 + alpha (thetaK - theta0) == lerp(thetaK, theta0, 1 - alpha)
            torch._foreach_lerp_([local(p) for p in active], theta0, 1.0 - self.alpha)
        closure()  # slow step at the repositioned point
        clip_and_step(params, optimizer, self.max_grad_norm, group)
        return StepStats(loss=loss, grad_norm=norm, backward_passes=self.K + 1, optimizer_steps=self.K + 1,
                         alpha=self.alpha)
