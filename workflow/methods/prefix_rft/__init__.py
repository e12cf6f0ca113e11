"""Prefix-RFT, the mixed-policy method `prefix_rft`: its settings `rl.prefix_rft`, its card and its verl hook
(every training rollout through rlsweep's agent loop, which continues the demonstration prefixes); the algorithm
is algorithm.py."""

from __future__ import annotations

from pydantic import Field, PositiveInt, model_validator

from workflow.methods.base import MIX_NUMBERS, Method, MethodSettings, numbers
from workflow.strict import ConfigProblem

# the name rlsweep's agent loop is registered under in verl (verl.py here)


class PrefixRFTConfig(MethodSettings):
    """Prefix-RFT (Huang et al., arXiv:2507.01679): `n_prefixed` of each group's G rollouts continue a prefix of the
    demonstration, a fraction drawn uniformly from [min_frac, upper] with upper decaying max_frac -> min_frac along
    a cosine over training; prefix tokens train with the clipped ratio, only the top `entropy_top` of them by
    entropy keeping their advantage (workflow/methods/prefix_rft/algorithm.py)."""

    n_prefixed: PositiveInt = Field(1, description=(
        "Rollouts of each group that continue a prefix of the demonstration (fewer than group_size)."))
    min_frac: float = Field(0.05, ge=0.0, le=1.0, description=(
        "Smallest prefix, as a fraction of the demonstration; the fraction is drawn uniformly from [min_frac, upper]."))
    max_frac: float = Field(0.95, ge=0.0, le=1.0, description=(
        "Where `upper` starts: it decays from max_frac to min_frac along a cosine over training (progress = step / "
        "rl.steps)."))
    entropy_top: float = Field(0.2, gt=0.0, le=1.0, description=(
        "Share of prefix tokens, highest entropy first, that keep their advantage (the rest train with the clipped "
        "ratio only)."))

    @model_validator(mode="after")
    def _fraction_order(self) -> "PrefixRFTConfig":
        if self.min_frac > self.max_frac:
            raise ConfigProblem("min_frac", f"{self.min_frac} must be <= max_frac ({self.max_frac})")
        return self

    def check(self, rl) -> None:
        if self.n_prefixed >= rl.group_size:
            raise ConfigProblem("prefix_rft.n_prefixed", f"{self.n_prefixed} must be < group_size ({rl.group_size}): every group "
                                "keeps at least one plain on-policy rollout")


METHOD = Method("mix", algorithm="workflow.methods.prefix_rft.algorithm:PrefixRFT", settings=PrefixRFTConfig,
                headline="prefix_len",
                reads_total_steps="Prefix-RFT's prefix schedule decays over rl.steps",
                numbers=MIX_NUMBERS + numbers(
                    ("prefix_len", "float", "mean demonstration prefix length (tokens) of the prefixed rollouts")))
