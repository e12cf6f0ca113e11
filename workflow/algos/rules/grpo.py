"""GRPO's step: one closure (one backward pass), one optimizer step, on-policy."""

from __future__ import annotations

from workflow.algos.registry import register_update_rule
from workflow.algos.rule import UpdateRule


@register_update_rule("grpo")
class GRPOStep(UpdateRule):
    """The plain on-policy step (UpdateRule's own step); no settings, no gate."""
