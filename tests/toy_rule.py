"""A toy update rule, the way a researcher adds one: one registered class (no settings, so no config section).
Two plain steps on the same rollout batch; on verl that equals calling verl's own train_batch twice."""

from __future__ import annotations

from workflow.algos.rule import StepStats, UpdateRule
from workflow.methods.registry import register_update_rule


@register_update_rule("toy_two_steps")
class TwoSteps(UpdateRule):
    def step(self, params, optimizer, closure) -> StepStats:
        first = self.grpo_step(params, optimizer, closure)
        self.grpo_step(params, optimizer, closure)
        return StepStats(loss=first.loss, grad_norm=first.grad_norm, backward_passes=2, optimizer_steps=2)
