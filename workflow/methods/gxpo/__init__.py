"""GXPO, the update rule `gxpo` (Gradient Extrapolation Policy Optimization): its settings `rl.gxpo` and its
card; the algorithm is algorithm.py."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveFloat, model_validator

from workflow.methods.base import Method, MethodSettings, numbers
from workflow.strict import ConfigProblem


class GXPOConfig(MethodSettings):
    """Gradient Extrapolation Policy Optimization: 2 probes, geometric K-step extrapolation, 1 corrective step."""

    K: int = Field(5, ge=2, description=(
        "Virtual depth: the extrapolation predicts K steps ahead from 2 probe steps (always 3 backward passes a "
        "step)."))
    alpha: float = Field(0.5, ge=0.0, le=1.0, description=(
        "Reposition scale: after the 2 probe steps the weights move to theta_0 + alpha x s x (theta_2 - theta_0), "
        "s = (1 - r^K) / (1 - r^2) from the estimated ratio r; then 1 corrective step."))
    eps: PositiveFloat = Field(1e-8, description=(
        "When the first probe gradient's norm is at most eps, no ratio is formed and the observed displacement is kept"
        " (s = 1)."))
    window: int = Field(20, ge=2, description="Past corrective-gradient norms the gate compares the step's against.")
    warmup: int = Field(10, ge=2, description="Steps that only fill the gate's window (the gate cannot trip before).")
    tau: PositiveFloat = Field(2.0, description=(
        "The gate trips when the corrective gradient norm's z-score exceeds tau; then plain GRPO for the rest of the "
        "run."))
    ratio_source: Literal["grad", "displacement"] = Field("grad", description=(
        "What the geometric ratio r is estimated from: the probes' gradients or their parameter displacements."))
    clamp: Literal["s", "r", "none"] = Field("s", description=(
        "What is clamped: the extrapolation factor s, the ratio r, or nothing."))
    clamp_min: float | None = Field(None, description=(
        "Lower clamp bound; null: s in [0, K], r in [-0.999, 1] (r in bfloat16: [-1 + 2^-7, 1], as -0.999 is -1 "
        "there)."))
    clamp_max: float | None = Field(None, description=(
        "Upper clamp bound; null: the default of `clamp` (see clamp_min)."))

    @model_validator(mode="after")
    def _clamp_order(self) -> "GXPOConfig":
        if self.clamp_min is not None and self.clamp_max is not None and self.clamp_min > self.clamp_max:
            raise ConfigProblem("clamp_min", f"{self.clamp_min} must be <= clamp_max ({self.clamp_max})")
        return self


METHOD = Method("update", algorithm="workflow.methods.gxpo.algorithm:GXPO", settings=GXPOConfig,
                headline="gxpo_scale_mean", passes=lambda cfg: 3,  # two probes and the corrective step, whatever K
                numbers=numbers(
    ("gxpo_ratio_p10", "float", "10th percentile of the estimated per-coordinate geometric ratio r"),
    ("gxpo_ratio_p50", "float", "median of the estimated ratio r"),
    ("gxpo_ratio_p90", "float", "90th percentile of the estimated ratio r"),
    ("gxpo_scale_mean", "float", "mean extrapolation factor s over the coordinates"),
    ("gxpo_inactive_frac", "float", "share of coordinates left unextrapolated (s = 1: gradient below eps)"),
    ("gxpo_cos_g0_gcorr", "float", "cosine between the first probe's and the corrective step's gradients"),
    ("gxpo_gcorr_norm", "float", "corrective gradient's norm (the gate's signal)")))
