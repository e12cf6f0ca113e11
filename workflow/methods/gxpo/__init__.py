"""GXPO, the update rule `gxpo` (Gradient Extrapolation Policy Optimization): its settings `rl.gxpo` and its
card; the algorithm is algorithm.py."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveFloat, model_validator

from workflow.methods.base import Method, MethodSettings
from workflow.strict import ConfigProblem


class GXPOConfig(MethodSettings):
    """Gradient Extrapolation Policy Optimization: 2 probes, geometric K-step extrapolation, 1 corrective step."""

    K: int = Field(5, ge=2)  # virtual depth; always 3 backward passes
    alpha: float = Field(0.5, ge=0.0, le=1.0)
    eps: PositiveFloat = 1e-8  # |g0| <= eps: no ratio, keep the observed displacement (s = 1)
    window: int = Field(20, ge=2)  # past corrective-gradient norms the gate compares against
    warmup: int = Field(10, ge=2)  # steps that only fill the gate's window
    tau: PositiveFloat = 2.0  # gate trips when z > tau; then plain GRPO for good
    ratio_source: Literal["grad", "displacement"] = "grad"
    clamp: Literal["s", "r", "none"] = "s"
    clamp_min: float | None = None  # None: s in [0, K]; r in [-0.999, 1]
    clamp_max: float | None = None

    @model_validator(mode="after")
    def _clamp_order(self) -> "GXPOConfig":
        if self.clamp_min is not None and self.clamp_max is not None and self.clamp_min > self.clamp_max:
            raise ConfigProblem("clamp_min", f"{self.clamp_min} must be <= clamp_max ({self.clamp_max})")
        return self


METHOD = Method("update", algorithm="workflow.methods.gxpo.algorithm:GXPO", settings=GXPOConfig)
