"""SFPO, the update rule `sfpo` (Slow-Fast Policy Optimization): its settings `rl.sfpo` and its card; the
algorithm is algorithm.py."""

from __future__ import annotations

from pydantic import Field, PositiveFloat

from workflow.methods.base import Method, MethodSettings


class SFPOConfig(MethodSettings):
    """Slow-Fast Policy Optimization: K fast steps, reposition by alpha, one slow step; entropy trigger."""

    K: int = Field(3, ge=1, description=(
        "Fast steps per RL step: K inner updates on the step's batch before the slow step."))
    alpha: float = Field(0.8, ge=0.0, le=1.0, description=(
        "Reposition: after the K fast steps the weights move back to theta_0 + alpha x (theta_K - theta_0) before the "
        "slow step."))
    window: int = Field(30, ge=2, description=(
        "Past entropies the trigger compares the step's entropy against (also its warm-up, in steps)."))
    tau: PositiveFloat = Field(1.0, description=(
        "The trigger: when the entropy's z-score over the window reaches tau, SFPO stops and the run continues as "
        "plain GRPO."))


METHOD = Method("update", algorithm="workflow.methods.sfpo.algorithm:SFPO", settings=SFPOConfig, headline="alpha",
                passes=lambda cfg: cfg.K + 1)  # K fast steps and the slow one
