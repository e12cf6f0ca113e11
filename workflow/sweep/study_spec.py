"""The sweep file's `optuna:` block: a study that searches the run config instead of a fixed grid.

```yaml
optuna:
  study: my_study                  # default: the sweep name
  storage: null                    # null: journal file results/<sweep>/optuna.journal; a path ending .journal or
                                   # .log: a journal file there; else an Optuna storage URL (sqlite:///x.db, ...)
  direction: maximize              # or `directions: [maximize, minimize]`, not both
  objective: math_avg_at_k         # a built-in (workflow/study/objective.py), {sql: "select run_id, ... AS value"},
                                   # or at equal compute: {avg_at_k_within: {backward_passes: 120}} (or rollouts, flops)
  sampler: {name: tpe, seed: 0}    # tpe | cmaes | gp | random | grid; `options:` go to its constructor
  pruner: {name: none}             # none | median | hyperband; `options:` go to its constructor
  n_trials: 6
  in_flight: 2                     # trials running at once
  space:                           # dotted run-config key -> distribution, sampled in this order
    rl.update: {type: categorical, choices: [sfpo, gxpo]}
    rl.sfpo.K: {type: int, low: 1, high: 5, when: {rl.update: sfpo}}
    rl.lr: {type: float, low: 1.0e-5, high: 1.0e-3, log: true}
```
These models only check shapes and types; what a value means against the run config (bounds, `when`, schema) is
checked by `workflow.study.space.check_space`, so every such problem is reported at once with its key.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator

from workflow.registry import Registry
from workflow.strict import ConfigProblem, Seed, Strict

Direction = Literal["maximize", "minimize"]


def _number(v: Any) -> Any:
    """One error per bad bound, not one per member of `int | float`; YAML reads 1e-4 (no dot) as a string."""
    if isinstance(v, str):
        for parse in (int, float):
            try:
                return parse(v)
            except ValueError:
                pass
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError("must be a number")
    return v


Number = Annotated[int | float, BeforeValidator(_number)]


class Param(Strict):
    """One searched key. int / float use low, high and optionally step or log; categorical uses choices.
    `when: {key: value or [values]}` samples the key only in trials where every listed key has (one of) the values.
    """

    type: Literal["int", "float", "categorical"] = Field(description=(
        "The distribution: int or float (low, high, and step or log), or categorical (choices)."))
    low: Number | None = Field(None, description="int / float: the smallest value.")
    high: Number | None = Field(None, description="int / float: the largest value.")
    step: Number | None = Field(None, description="int / float: the grid step between low and high.")
    log: bool = Field(False, description="int / float: sample on a log scale.")
    choices: list[Any] | None = Field(None, description="categorical: the values to choose from.")
    when: dict[str, Any] = Field(default_factory=dict, description=(
        "Sample this key only in trials where every key listed has (one of) the given value(s), e.g. {rl.update: "
        "sfpo}; other trials keep the base value."))


# Optuna's samplers and pruners by name, imported only when a study starts (reading a sweep imports no Optuna); a
# package adds its own through the entry-point groups rlsweep.samplers / rlsweep.pruners (workflow/registry.py)
SAMPLERS = Registry("sampler", "samplers", base="optuna.samplers:BaseSampler", builtins={
    "tpe": "optuna.samplers:TPESampler", "cmaes": "optuna.samplers:CmaEsSampler", "gp": "optuna.samplers:GPSampler",
    "random": "optuna.samplers:RandomSampler", "grid": "workflow.study.factory:AskTellGridSampler"})
PRUNERS = Registry("pruner", "pruners", base="optuna.pruners:BasePruner", builtins={
    "none": "optuna.pruners:NopPruner", "median": "optuna.pruners:MedianPruner",
    "hyperband": "optuna.pruners:HyperbandPruner"})


def _one_of(registry: Registry):
    def check(name: str) -> str:
        if name not in registry:
            raise ConfigProblem("", registry.unknown(name))
        return name
    return check


class SamplerSpec(Strict):
    name: Annotated[str, AfterValidator(_one_of(SAMPLERS))] = Field("tpe", description=(
        "Optuna's sampler: tpe, cmaes, gp, random, grid, or one a plug-in registers."))
    seed: Seed | None = Field(None, description="The sampler's seed; null: unseeded.")
    options: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the sampler's constructor.")


class PrunerSpec(Strict):
    name: Annotated[str, AfterValidator(_one_of(PRUNERS))] = Field("none", description=(
        "Optuna's pruner: none, median, hyperband, or one a plug-in registers; after each evaluated segment of a "
        "trial's runs (eval.every; all its seeds) it may stop the trial before its next segment."))
    options: dict[str, Any] = Field(default_factory=dict, description=(
        "Keyword arguments of the pruner's constructor, e.g. n_warmup_steps, min_resource, reduction_factor."))


class SQLObjective(Strict):
    sql: str = Field(description=(
        "A SELECT over the result tables returning run_id and value (one column per direction of a multi-objective "
        "study)."))


Budgeted = Literal["backward_passes", "rollouts", "flops"]


class BudgetObjective(Strict):
    """A compute-normalised objective: each run's mean avg@k at its last evaluation whose running total of one
    train_steps counter (backward passes, rollouts or FLOPs) is within the budget, e.g.
    `{avg_at_k_within: {backward_passes: 120}}` (the runs need evaluations along the way: eval.every, at_start)."""

    avg_at_k_within: dict[Budgeted, Annotated[float, Field(gt=0)]] = Field(description=(
        "{counter: budget}: each run's mean avg@k at its last evaluation within the budget of one train_steps counter "
        "(backward_passes, rollouts or flops); the runs need evaluations along the way (eval.every, eval.at_start)."))

    @field_validator("avg_at_k_within")
    @classmethod
    def _one_budget(cls, v: dict) -> dict:
        if len(v) != 1:
            raise ValueError(f"{sorted(v)}: give exactly one budget (backward_passes, rollouts or flops)")
        return v


class OptunaSpec(Strict):
    study: str | None = Field(None, min_length=1, description="The study's name; null: the sweep's name.")
    storage: str | None = Field(None, description=(
        "null: a journal file results/<sweep>/optuna.journal; a path ending .journal or .log: a journal file there; "
        "else an Optuna storage URL (sqlite:///x.db, ...)."))
    direction: Direction | None = Field(None, description=(
        "maximize or minimize the objective (or `directions`, not both)."))
    directions: list[Direction] | None = Field(None, description=(
        "One direction per objective value of a multi-objective study."))
    objective: str | SQLObjective | BudgetObjective = Field(description=(
        "A built-in objective's name (workflow/study/objective.py), {sql: ...}, or {avg_at_k_within: {COUNTER: N}} (at"
        " equal compute)."))
    sampler: SamplerSpec = Field(SamplerSpec(), description="Which sampler proposes the trials.")
    pruner: PrunerSpec = Field(PrunerSpec(), description="Which pruner stops unpromising trials early.")
    n_trials: int = Field(description="Trials in all (a failed trial counts, as in Optuna's optimize).")
    in_flight: int = Field(1, description="Trials running at once.")
    space: dict[str, Param] = Field(description="Dotted run-config key -> its distribution, sampled in this order.")

    @field_validator("objective", mode="before")
    @classmethod
    def _one_error(cls, v: Any) -> Any:  # one clear line, not one per member of the union
        if not isinstance(v, (str, dict, SQLObjective, BudgetObjective)):
            raise ValueError("must be a built-in objective's name, {sql: <query>} or {avg_at_k_within: {KEY: N}}")
        return v

    @property
    def study_directions(self) -> list[str]:
        """The study's direction(s); maximize when neither field is given."""
        if self.directions is not None:
            return list(self.directions)
        return [self.direction or "maximize"]
