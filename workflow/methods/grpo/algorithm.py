"""GRPO's step: one closure (one backward pass), one optimizer step, on-policy."""

from __future__ import annotations

from workflow.algos.rule import UpdateRule


class GRPOStep(UpdateRule):
    """The plain on-policy step (UpdateRule's own step); no settings, no gate."""
