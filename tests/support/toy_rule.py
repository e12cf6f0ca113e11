"""A toy update rule, the way a researcher adds one: one registered class (no settings, so no config section).
Two plain steps on the same rollout batch; on verl that equals calling verl's own train_batch twice. It logs a number
of its own, `toy_steps_taken`, which becomes a train_steps column on both engines."""

from __future__ import annotations

from workflow.algos.rule import StepStats, UpdateRule
from workflow.methods.base import numbers
from workflow.methods.registry import register_update_rule


@register_update_rule("toy_two_steps", numbers=numbers(("toy_steps_taken", "int", "optimizer steps the rule took")))
class TwoSteps(UpdateRule):
    def step(self, params, optimizer, closure) -> StepStats:
        first = self.grpo_step(params, optimizer, closure)
        self.grpo_step(params, optimizer, closure)
        return StepStats(loss=first.loss, grad_norm=first.grad_norm, backward_passes=2, optimizer_steps=2,
                         diagnostics={"toy_steps_taken": 2})
