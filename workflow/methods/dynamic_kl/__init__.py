"""FAST-GRPO's dynamic KL, the part `dynamic_kl` (workflow/algos/fast_grpo.py): its settings `rl.dynamic_kl`
and its card; the per-group coefficient is computed in algorithm.py."""

from __future__ import annotations

from pydantic import Field, NonNegativeFloat, model_validator

from workflow.methods.base import Method, PartSettings, numbers
from workflow.strict import ConfigProblem


class DynamicKLConfig(PartSettings):
    """Group-accuracy-based KL: each group's KL coefficient beta_min + (beta_max - beta_min) x its accuracy, on the
    low-variance (k3) estimator against the initial policy; replaces rl.kl_coef."""

    beta_min: NonNegativeFloat = Field(0.001, description=(
        "A group's KL coefficient at accuracy 0: beta_min + (beta_max - beta_min) x accuracy."))
    beta_max: NonNegativeFloat = Field(0.01, description="A group's KL coefficient at accuracy 1.")

    @model_validator(mode="after")
    def _order(self) -> "DynamicKLConfig":
        if self.beta_min > self.beta_max:
            raise ConfigProblem("beta_min", f"{self.beta_min} must be <= beta_max ({self.beta_max})")
        return self

    def check(self, rl) -> None:
        if rl.kl_coef > 0:
            raise ConfigProblem("kl_coef", f"{rl.kl_coef}: with dynamic_kl each group's coefficient comes from its "
                                "accuracy (dynamic_kl.beta_min .. beta_max); set kl_coef to 0")


METHOD = Method("part", algorithm="workflow.methods.dynamic_kl.algorithm:DynamicKL", settings=DynamicKLConfig,
                headline="kl_coef_mean",
                uses_reference=True,  # the KL penalty is against the reference policy
                numbers=numbers(("kl_coef_mean", "float", "mean of the groups' KL coefficients")))
