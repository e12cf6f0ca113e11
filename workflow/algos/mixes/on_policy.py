"""`rl.mix: none`: plain on-policy RL, no demonstrations (MixedPolicy's own behaviour)."""

from __future__ import annotations

from workflow.algos.mix import MixedPolicy
from workflow.algos.registry import register_mix


@register_mix("none")
class OnPolicy(MixedPolicy):
    """Every sequence a rollout, every rollout in the RL loss."""
