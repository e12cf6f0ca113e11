"""LUFFY, the mixed-policy method `luffy`: its settings `rl.luffy` and its card; the algorithm is algorithm.py."""

from __future__ import annotations

from pydantic import Field, PositiveFloat, PositiveInt

from workflow.methods.base import MIX_NUMBERS, Method, MethodSettings, numbers
from workflow.strict import ConfigProblem


class LUFFYConfig(MethodSettings):
    """LUFFY (Yan et al., arXiv:2504.14945): n_off of each group's G sequences are the prompt's expert trace instead
    of rollouts; advantages over the mixed group; expert tokens trained with -f(pi) A, f(pi) = pi / (pi + lam)."""

    n_off: PositiveInt = Field(1, description=(
        "Sequences of each group that are the prompt's expert trace instead of rollouts (fewer than group_size)."))
    lam: PositiveFloat = Field(0.1, description=(
        "Policy shaping: expert tokens train with -f(pi) A, f(pi) = pi / (pi + lam)."))

    def check(self, rl) -> None:
        if self.n_off >= rl.group_size:
            raise ConfigProblem("luffy.n_off", f"{self.n_off} must be < group_size ({rl.group_size}): every group keeps at "
                                "least one plain on-policy rollout")


METHOD = Method("mix", algorithm="workflow.methods.luffy.algorithm:LUFFY", settings=LUFFYConfig,
                headline="off_policy_frac",
                numbers=MIX_NUMBERS + numbers(
                    ("trace_reward", "float", "mean reward of the expert traces (a wrong trace shows here)")))
