"""A trial's objective: SQL over the sweep's tables (the views of `rlsweep query`), one value per run.

The query returns rows `(run_id, value)`; the trial's value is the mean over the trial's runs (its seed replicates),
so `seeds: [0, 1, 2]` makes every trial three runs averaged in the objective, and `seeds: [0]` a fixed seed. A
trial whose runs have no value (NULL or no row) fails with a message naming the run: an objective that silently
reads nothing would steer the sampler with garbage.
"""

from __future__ import annotations

import math
from pathlib import Path

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


class ObjectiveError(RuntimeError):
    pass


def objective_sql(objective) -> str:
    return OBJECTIVES[objective] if isinstance(objective, str) else objective.sql


def run_values(sql: str, results_root: str | Path, sweep: str) -> dict[str, float]:
    from workflow.results.catalog import QueryError, query
    try:
        table = query(sql, results_root, sweep)
    except QueryError as e:
        raise ObjectiveError(f"the objective's SQL failed: {e}") from None
    if {"run_id", "value"} - set(table.column_names):
        raise ObjectiveError(f"the objective's SQL must return columns run_id and value (got "
                             f"{', '.join(table.column_names)})")
    out: dict[str, list[float]] = {}
    for row in table.select(["run_id", "value"]).to_pylist():
        if row["value"] is not None:
            out.setdefault(row["run_id"], []).append(float(row["value"]))
    return {k: sum(v) / len(v) for k, v in out.items()}


def trial_value(sql: str, results_root: str | Path, sweep: str, run_ids: list[str]) -> float:
    """The mean of the runs' values; ObjectiveError if a run has none."""
    values = run_values(sql, results_root, sweep)
    missing = [r for r in run_ids if r not in values or not math.isfinite(values[r])]
    if missing:
        raise ObjectiveError(f"the objective has no value for run(s) {', '.join(missing)}")
    return sum(values[r] for r in run_ids) / len(run_ids)
