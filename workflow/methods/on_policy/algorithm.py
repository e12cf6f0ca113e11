"""`rl.mix: none`: plain on-policy RL, no demonstrations (MixedPolicy's own behaviour)."""

from __future__ import annotations

from workflow.algos.mix import MixedPolicy


class OnPolicy(MixedPolicy):
    """Every sequence a rollout, every rollout in the RL loss."""
