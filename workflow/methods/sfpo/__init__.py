"""SFPO, the update rule `sfpo` (Slow-Fast Policy Optimization): its settings `rl.sfpo` and its card; the
algorithm is algorithm.py."""

from __future__ import annotations

from pydantic import Field, PositiveFloat

from workflow.methods.base import Method, MethodSettings


class SFPOConfig(MethodSettings):
    """Slow-Fast Policy Optimization: K fast steps, reposition by alpha, one slow step; entropy trigger."""

    K: int = Field(3, ge=1)
    alpha: float = Field(0.8, ge=0.0, le=1.0)
    window: int = Field(30, ge=2)  # past entropies the trigger compares against (also its warm-up)
    tau: PositiveFloat = 1.0  # trigger when the entropy z-score >= tau; then plain GRPO for good


METHOD = Method("update", algorithm="workflow.methods.sfpo.algorithm:SFPO", settings=SFPOConfig)
