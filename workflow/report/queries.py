"""The report's numbers: the named DuckDB queries of queries.sql, filled in with one sweep's values and run on
its tables (workflow/results/catalog.py: read-only). The filled-in text is what the report ships as
report/queries.sql, so every number in it can be rerun or changed with `rlsweep query`."""

from __future__ import annotations

import re
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from string import Template

import pyarrow as pa

from workflow.benchmarks.catalog import MATH_SET, OOD_SET, REGISTRY
from workflow.methods.registry import step_numbers
from workflow.results.catalog import Catalog

SQL = Path(__file__).with_name("queries.sql")
_BLOCK = re.compile(r"^-- name: (\w+)\n(.*?)^;$", re.S | re.M)


@dataclass(frozen=True)
class PlannedRun:
    """A run the sweep file plans (its RL job), as the queries' `planned` table holds it."""

    run_id: str
    eval_id: str  # its evaluations' id: runs of one RL job under different eval settings are different settings
    label: str
    method: str
    seed: int
    steps: int
    gpus: int  # GPUs of its RL job (verl's n_gpus_per_node x nnodes; 0: the local engine, on CPU)
    start_from: str | None = None  # what its step 0 evaluates (Run.start_name: `SFT <id>` or a model_path)


def _literal(value) -> str:
    if value is None:
        return "NULL::VARCHAR"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def planned_sql(runs: list[PlannedRun]) -> str:
    """The sweep's planned runs as a SELECT (VALUES ...) with named columns."""
    names = [f.name for f in fields(PlannedRun)]
    if not runs:
        types = {f.name: "BIGINT" if f.type == "int" else "VARCHAR" for f in fields(PlannedRun)}
        return "SELECT " + ", ".join(f"NULL::{types[n]} AS {n}" for n in names) + " WHERE false"
    rows = ",\n        ".join("(" + ", ".join(_literal(v) for v in astuple(r)) + ")" for r in runs)
    return f"SELECT * FROM (VALUES\n        {rows}) AS planned({', '.join(names)})"


def t_quantiles(max_df: int = 100) -> str:
    """Student's t 0.975 quantiles for 1..max_df degrees of freedom, as VALUES rows (df, t). (scipy.special's inverse
    of the t distribution, the one scipy.stats.t.ppf calls: importing scipy.stats took ~1.5 s of every report.)"""
    from scipy.special import stdtrit
    return ", ".join(f"({df}, {stdtrit(df, 0.975):.6f})" for df in range(1, max_df + 1))


BOOTSTRAP = 1000  # resamples of the paired comparison
# each RL run's running totals of compute at each step (the efficiency and eval_curves queries' `spent`)
SPENT = """
    SELECT run_id, step,
           sum(backward_passes) OVER w AS backward_passes, sum(rollouts) OVER w AS rollouts,
           sum(flops) OVER w AS flops, sum(wall_s) OVER w AS wall_s
    FROM train_steps WHERE stage = 'rl'
    WINDOW w AS (PARTITION BY run_id ORDER BY step)
"""


def own_grader_sql() -> str:
    """Each benchmark's own grader as SQL over a `benchmark` column: eval_samples rows written before the grader
    column existed (null) were judged by it."""
    cases = " ".join(f"WHEN {_literal(b.name)} THEN {_literal(b.grader)}" for _, b in REGISTRY.items())
    return f"CASE benchmark {cases} END"


def fill(runs: list[PlannedRun], baseline: str | None = None, text: str | None = None) -> str:
    """queries.sql with the sweep's values in place of its $names (`baseline`: the setting the efficiency and
    paired queries compare with; None: they return no rows)."""
    sets = {"bootstrap": BOOTSTRAP, "baseline": "NULL" if baseline is None else _literal(baseline),
            "baseline_name": baseline or "none",
            "math_set": ", ".join(_literal(b) for b in MATH_SET), "n_math": len(MATH_SET),
            "ood_set": ", ".join(_literal(b) for b in OOD_SET), "n_ood": len(OOD_SET),
            "method_numbers": ", ".join(_literal(n.name) for n, _ in step_numbers())}
    return Template(text or SQL.read_text()).substitute(planned=planned_sql(runs), t95=t_quantiles(), spent=SPENT,
                                                        own_grader=own_grader_sql(), **sets)


def blocks(text: str) -> dict[str, str]:
    """The named queries of a (filled-in) queries.sql, by name."""
    found = {name: body.strip() for name, body in _BLOCK.findall(text)}
    if not found:
        raise ValueError("no `-- name:` blocks in the report's queries")
    return found


def run_all(catalog: Catalog, text: str) -> dict[str, pa.Table]:
    """Every named query of `text` on the catalog's tables (over one connection)."""
    return catalog.queries(blocks(text))
