"""A trial's objective: SQL over the sweep's tables (the views of `rlsweep query`), one value per run.

The query returns rows `(run_id, value)` (a multi-objective study: `run_id` then one value column per direction, in
the order of `directions`); the trial's value is the mean over the trial's runs (its seed replicates),
so `seeds: [0, 1, 2]` makes every trial three runs averaged in the objective, and `seeds: [0]` a fixed seed. A
trial whose runs have no value (NULL or no row) fails with a message naming the run: an objective that silently
reads nothing would steer the sampler with garbage.
"""

from __future__ import annotations

import math
from pathlib import Path

from workflow.sweep.study_spec import BudgetObjective

# each run's last evaluated step, the mean over its benchmarks of avg@k (one row per benchmark: avg@k does not
# depend on the k of the row, pass@k does)
_LAST_EVAL = """
WITH last AS (
    SELECT run_id, benchmark, max(avg_at_k) AS avg_at_k FROM eval_scores
    {where}
    GROUP BY run_id, benchmark, step
    QUALIFY step = max(step) OVER (PARTITION BY run_id)
)
SELECT run_id, avg(avg_at_k) AS value FROM last GROUP BY run_id
"""

OBJECTIVES: dict[str, str] = {
    # mean avg@k over every evaluated benchmark at the run's last eval step
    "avg_at_k": _LAST_EVAL.format(where=""),
    # the same over the six math benchmarks only (MATH-500, AIME24/25, AMC, Minerva, OlympiadBench)
    "math_avg_at_k": _LAST_EVAL.format(
        where="WHERE benchmark IN ('math500', 'aime24', 'aime25', 'amc23', 'amc83', 'minerva', 'olympiadbench')"),
    # mean training reward over the last 10 RL steps (no eval needed; a noisier signal)
    "final_reward": """
        SELECT run_id, avg(reward) AS value FROM (
            SELECT run_id, reward FROM train_steps WHERE stage = 'rl'
            QUALIFY step > max(step) OVER (PARTITION BY run_id) - 10
        ) GROUP BY run_id
    """,
}


# a compute-normalised objective (spec.BudgetObjective): avg@k at each run's last evaluation within a budget of one
# train_steps counter, its running total up to the evaluated step (step 0, eval.at_start, has spent nothing)
_WITHIN_BUDGET = """
WITH spent AS (
    SELECT run_id, step, sum({counter}) OVER (PARTITION BY run_id ORDER BY step) AS spent
    FROM train_steps WHERE stage = 'rl'
), evals AS (
    SELECT e.run_id, e.step, e.benchmark, max(e.avg_at_k) AS avg_at_k, coalesce(any_value(s.spent), 0) AS spent
    FROM eval_scores e LEFT JOIN spent s ON s.run_id = e.run_id AND s.step = e.step
    GROUP BY e.run_id, e.step, e.benchmark
), within AS (
    SELECT * FROM evals WHERE spent <= {budget!r}
    QUALIFY step = max(step) OVER (PARTITION BY run_id)
)
SELECT run_id, avg(avg_at_k) AS value FROM within GROUP BY run_id
"""


class ObjectiveError(RuntimeError):
    pass


def objective_sql(objective) -> str:
    if isinstance(objective, str):
        return OBJECTIVES[objective]
    if isinstance(objective, BudgetObjective):
        ((counter, budget),) = objective.avg_at_k_within.items()
        return _WITHIN_BUDGET.format(counter=counter, budget=float(budget))
    return objective.sql


def objective_name(objective) -> str:
    """How status and validate name a study's objective."""
    if isinstance(objective, str):
        return objective
    if isinstance(objective, BudgetObjective):
        ((counter, budget),) = objective.avg_at_k_within.items()
        return f"avg@k within {budget:g} {counter}"
    return "sql"


def run_values(sql: str, results_root: str | Path, sweep: str, n_values: int = 1) -> dict[str, list[float]]:
    """run_id -> its values (the columns after run_id: `value`, or one per direction)."""
    from workflow.results.catalog import QueryError, query  # DuckDB: not for reading a sweep (OBJECTIVES above)
    try:
        table = query(sql, results_root, sweep)
    except QueryError as e:
        raise ObjectiveError(f"the objective's SQL failed: {e}") from None
    names = table.column_names
    values = [c for c in names if c != "run_id"]
    if "run_id" not in names or (n_values == 1 and "value" not in names) or (n_values > 1 and len(values) != n_values):
        want = "run_id and value" if n_values == 1 else f"run_id and {n_values} value columns (one per direction)"
        raise ObjectiveError(f"the objective's SQL must return {want} (got {', '.join(names)})")
    if n_values == 1:
        values = ["value"]
    out: dict[str, list[float]] = {}
    for row in table.to_pylist():
        vals = [row[c] for c in values]
        if all(v is not None and math.isfinite(float(v)) for v in vals):
            out.setdefault(row["run_id"], []).append([float(v) for v in vals])
    # several rows for one run (an objective that does not group by run): their mean
    return {k: [sum(col) / len(col) for col in zip(*rows)] for k, rows in out.items()}


def trial_values(sql: str, results_root: str | Path, sweep: str, run_ids: list[str], n_values: int = 1) -> list[float]:
    """The trial's value(s): the mean over its runs; ObjectiveError if a run has none."""
    values = run_values(sql, results_root, sweep, n_values)
    missing = [r for r in run_ids if r not in values]
    if missing:
        raise ObjectiveError(f"the objective has no value for run(s) {', '.join(missing)}")
    return [sum(values[r][i] for r in run_ids) / len(run_ids) for i in range(n_values)]


def trial_value(sql: str, results_root: str | Path, sweep: str, run_ids: list[str]) -> float:
    return trial_values(sql, results_root, sweep, run_ids)[0]
