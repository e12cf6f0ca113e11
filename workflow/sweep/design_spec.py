"""The sweep file's `seeds:` as a design: seeds on demand, added only where a comparison is still undecided.

```yaml
seeds:
  compare: rl.update        # a grid / zip key: its values are compared, the sweep's other keys fixed (one family
                            # per combination of the others); or `baseline`: every setting against report.baseline
  metric: avg_at_k          # the value per run: a built-in objective (workflow/study/objective.py), {sql: ...} or
                            # {avg_at_k_within: {backward_passes: N}}; default: final avg@k over eval.benchmarks
  per_round: 5              # n: seeds per setting per round (the same seed values for every setting still in play)
  rounds: 4                 # K: rounds at most, fixed before the first look (the test's boundaries depend on it)
  error: 0.05               # the family-wise error over every pair of every family and every round
  gpu_hours: 200            # optional: stop before a round would overrun it (pairs left: undecided (budget))
```
Round r trains seeds first + (r - 1) * per_round ... first + r * per_round - 1 of every setting still in play; a run's
id hashes its seed's value, so seeds an earlier sweep trained are reused. The test: AdaStop (workflow/design/).
A list (`seeds: [0, 1]`) is today's fixed seeds, unchanged.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import Field, field_validator, model_validator

from workflow.strict import ConfigProblem, Seed, Strict
from workflow.sweep.study_spec import BudgetObjective, SQLObjective

# The floor of a permutation test's decisions: pure arithmetic, so reading a sweep imports no numpy.
def first_look_splits(n: int) -> int:
    """How many ways the first look can split a pair's 2n runs between the two sides: C(2n, n)."""
    return math.comb(2 * n, n)


def smallest_tail(n: int, looks: int) -> float:
    """The smallest null probability a two-sided permutation test over `looks` blocks of n runs per side can put
    beyond its observed statistic: the identity and its mirror image (the two sides swapped) always tie, so 2 of
    C(2n, n)^looks equally likely block splits."""
    return math.exp(math.log(2) - looks * math.log(first_look_splits(n)))


def can_decide_at(look: int, n: int, K: int, alpha: float) -> bool:
    """Whether look `look` (1-based) can reject at all, with nothing spent before it: its level alpha * look / K must
    reach the smallest tail of a permutation test over that many blocks."""
    # in logs: C(2n, n)^look overflows a float long before it stops mattering
    return math.log(2) - look * math.log(first_look_splits(n)) <= math.log(alpha * look / K)


def first_deciding_look(n: int, K: int, alpha: float) -> int | None:
    """The first look (1-based) that can reject; None when no look up to K can (the design can only end `equal`)."""
    return next((k for k in range(1, K + 1) if can_decide_at(k, n, K, alpha)), None)


def smallest_n_for_first_look(K: int, alpha: float) -> int:
    """The fewest runs per setting per round with which the first look can already decide."""
    n = 1
    while not can_decide_at(1, n, K, alpha):
        n += 1
    return n


BASELINE = "baseline"  # `compare: baseline`: every setting against the report's baseline


class SeedDesign(Strict):
    """Seeds on demand: rounds of `per_round` seeds per setting still in an undecided comparison, decided by a
    group-sequential permutation test (AdaStop) whose family-wise error over every pair and round is `error`."""

    compare: str = Field(description=(
        "What is compared: a grid or zip key (its values, with the sweep's other keys fixed: one family per "
        "combination of the other keys, every pair within a family), or `baseline` (every setting against "
        "report.baseline)."))
    metric: str | SQLObjective | BudgetObjective = Field("avg_at_k", description=(
        "Each run's value: a built-in objective's name (workflow/study/objective.py; default avg_at_k, the mean avg@k "
        "over the evaluated benchmarks at the run's last evaluation), {sql: ...} returning run_id and value, or "
        "{avg_at_k_within: {COUNTER: N}}."))
    per_round: int = Field(ge=1, le=1000, description=(
        "n: seeds per setting per round. The first round can decide only if C(2n, n) >= 2 K / error (`rlsweep "
        "validate` says which round can first decide)."))
    rounds: int = Field(ge=1, le=100, description=(
        "K: rounds at most, fixed before the first look (the test's boundaries depend on it); pairs still open after "
        "round K are `equal`."))
    error: float = Field(0.05, description=(
        "The family-wise error level in (0, 1): the chance of calling any pair different that is not, over every pair "
        "and every round."))
    gpu_hours: float | None = Field(None, gt=0, description=(
        "A GPU-hour budget: the design stops before a round whose estimated cost would overrun it (the pairs still "
        "open are `undecided (budget)`; the error guarantee holds). null: no budget."))
    first: Seed = Field(0, description=(
        "The first seed value: round r trains seeds first + (r-1)*per_round .. first + r*per_round - 1."))
    permutations: int = Field(10_000, ge=100, le=1_000_000, description=(
        "Permutation paths of the test's null distribution (its Monte Carlo resolution)."))
    test_seed: Seed = Field(0, description=(
        "The permutations' seed: the same values give the same decisions."))

    @field_validator("metric", mode="before")
    @classmethod
    def _one_error(cls, v: Any) -> Any:  # one clear line, not one per member of the union
        if not isinstance(v, (str, dict, SQLObjective, BudgetObjective)):
            raise ValueError("must be a built-in objective's name, {sql: <query>} or {avg_at_k_within: {KEY: N}}")
        return v

    @field_validator("error")
    @classmethod
    def _level(cls, v: float) -> float:
        if not 0 < v < 1:
            raise ConfigProblem("", f"{v}: the family-wise error level must be in (0, 1), e.g. 0.05")
        return v

    @model_validator(mode="after")
    def _some_round_decides(self) -> "SeedDesign":
        if first_deciding_look(self.per_round, self.rounds, self.error) is None:
            raise ConfigProblem("per_round", (
                f"{self.per_round} with rounds {self.rounds} at error {self.error}: no round can ever decide (even at round {self.rounds}, the permutation test's smallest tail 2 / C(2n, n)^K exceeds "
                f"the error; every pair would end `equal`): raise per_round (>= "
                f"{smallest_n_for_first_look(self.rounds, self.error)} decides from the first round) or rounds"))
        return self

    def seeds_of_round(self, r: int) -> list[int]:
        """The seed values round r (1-based) trains, for every setting still in play."""
        start = self.first + (r - 1) * self.per_round
        return list(range(start, start + self.per_round))

    @property
    def first_deciding_round(self) -> int:
        return first_deciding_look(self.per_round, self.rounds, self.error)
