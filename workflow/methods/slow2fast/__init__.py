"""FAST-GRPO's Slow2Fast sampling, the part `slow2fast` (workflow/algos/fast_grpo.py): its settings
`rl.slow2fast`, its card and its verl hook (with `refill: resample`, verl's sampling runs through rlsweep's
sampler, which drops and refills groups); which groups a step keeps is computed in algorithm.py."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, field_validator

from workflow.methods.base import Method, PartSettings, numbers
from workflow.strict import ConfigProblem

AccuracyBounds = tuple[float, float]


class Slow2FastConfig(PartSettings):
    """Slow2Fast sampling: keep the groups whose accuracy lies in `slow` during the first `switch` share of
    training, in `fast` after it (bounds inclusive); refill the step by sampling more prompts (resample, at most
    max_rounds extra rounds) or train on the groups kept (shrink)."""

    switch: float = Field(0.5, gt=0.0, lt=1.0, description=(
        "Share of training in the slow phase (progress = step / rl.steps); the fast phase after it."))
    slow: AccuracyBounds = Field((0.3, 0.99), description=(
        "Group accuracy bounds [low, high] (inclusive) a group must lie in to be kept during the slow phase."))
    fast: AccuracyBounds = Field((0.01, 0.7), description=(
        "Group accuracy bounds [low, high] (inclusive) a group must lie in to be kept during the fast phase."))
    refill: Literal["resample", "shrink"] = Field("resample", description=(
        "A step short of kept groups: resample more prompts (at most max_rounds extra rounds) or train on the groups "
        "kept (shrink)."))
    max_rounds: PositiveInt = Field(4, description="Extra sampling rounds per step when refill is resample.")

    @field_validator("slow", "fast")
    @classmethod
    def _bounds(cls, v: AccuracyBounds) -> AccuracyBounds:
        low, high = v
        if not 0.0 <= low <= high <= 1.0:
            raise ConfigProblem("", f"[{low}, {high}]: accuracy bounds need 0 <= low <= high <= 1")
        return v


METHOD = Method("part", algorithm="workflow.methods.slow2fast.algorithm:Slow2Fast", settings=Slow2FastConfig,
                headline="kept_groups",
                reads_total_steps="Slow2Fast's phases depend on rl.steps", numbers=numbers(
                    ("kept_groups", "int", "groups the step trained on"),
                    ("dropped_groups", "int", "groups left out (accuracy outside the phase's band)"),
                    ("extra_rollouts", "int", "rollouts sampled in refill rounds")))
