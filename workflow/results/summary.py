"""The aggregate stage: a Markdown summary of a sweep, computed with SQL over its tables.

Replicates (runs with the same label, different seeds) are averaged with their standard deviation shown; nothing
is declared a winner, since at demo scale gaps of a point or two are inside the seed noise.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from rich.console import Console
from rich.table import Table

from workflow.atomic import write_text
from workflow.benchmarks.catalog import MATH_SET, OOD_SET
from workflow.benchmarks.metrics import set_average
from workflow.results.catalog import Catalog, Damaged

_PER_SETTING = """
WITH final AS (  -- each run's last evaluated step, per eval settings (eval id)
    SELECT s.* FROM eval_scores s
    QUALIFY s.step = max(s.step) OVER (PARTITION BY s.run_id, s.eval_id, s.benchmark)
), evals AS (  -- an eval id's setting: one RL run evaluated under two eval settings is two settings (the label of
              -- its latest job: an edit of the sweep file may have relabelled it)
    SELECT run_id AS eval_id, coalesce(arg_max(label, started_at), any_value(label)) AS label
    FROM runs WHERE stage = 'eval' GROUP BY ALL
), per_run AS (
    SELECT coalesce(e.label, r.label) AS label, r.method, f.run_id, f.eval_id, f.benchmark, f.n_samples,
           max(f.avg_at_k) AS avg_at_k,
           max(CASE WHEN f.k = f.n_samples THEN f.pass_at_k END) AS pass_at_n,
           max(f.mean_len) AS mean_len
    FROM final f JOIN runs r ON r.run_id = f.run_id AND r.stage = 'rl'
    LEFT JOIN evals e USING (eval_id)
    GROUP BY ALL
)
SELECT label, method, benchmark, count(*) AS seeds, any_value(n_samples) AS k,
       avg(avg_at_k) AS avg_at_k, coalesce(stddev_samp(avg_at_k), 0) AS avg_at_k_std,
       avg(pass_at_n) AS pass_at_k, coalesce(stddev_samp(pass_at_n), 0) AS pass_at_k_std,
       avg(mean_len) AS mean_len
FROM per_run GROUP BY ALL ORDER BY benchmark, method, label
"""


def summarize(results_root: str | Path, sweep: str, catalog: Catalog | None = None) -> pa.Table:
    return (catalog or Catalog(results_root, sweep)).query(_PER_SETTING)


def _set_averages(rows: list[dict]) -> list[str]:
    """The seeds' "Avg" columns: per setting, the unweighted mean avg@k over the math set and over the OOD set
    (only when every benchmark of the set was evaluated)."""
    by_setting: dict[tuple[str, str], dict[str, float]] = {}
    for r in rows:
        by_setting.setdefault((r["method"], r["label"] or ""), {})[r["benchmark"]] = r["avg_at_k"]
    out = []
    for (method, label), scores in sorted(by_setting.items()):
        cells = [set_average(scores, MATH_SET), set_average(scores, OOD_SET)]
        if any(c is not None for c in cells):
            shown = " | ".join("—" if c is None else f"{c:.3f}" for c in cells)
            out.append(f"| {method} | {label} | {shown} |")
    if not out:
        return []
    return ["", f"Set averages of avg@k (math: {', '.join(MATH_SET)}; OOD: {', '.join(OOD_SET)}):", "",
            "| method | setting | Avg math | Avg OOD |", "|---|---|---|---|", *out]


def _left_out(damaged: list[Damaged]) -> list[str]:
    """Unreadable table files the numbers above could not include: said in the summary itself, not only in a log."""
    if not damaged:
        return []
    names = ", ".join(f"`{d.table}/{d.path.name}`" for d in damaged)
    return ["", f"Left out, unreadable ({len(damaged)} table files; `rlsweep doctor` says how to recompute them): "
            f"{names}."]


def write_summary(results_root: str | Path, sweep: str, out: str | Path) -> Path:
    catalog = Catalog(results_root, sweep)
    rows = summarize(results_root, sweep, catalog).to_pylist()
    lines = [f"# Sweep `{sweep}`", "",
             "Mean ± standard deviation over seeds of each setting's final evaluation. avg@k is the mean accuracy "
             "over k samples per problem; pass@k uses the unbiased estimator. Differences smaller than the spread "
             "across seeds are noise.", "",
             "| benchmark | method | setting | seeds | avg@k | pass@k | mean length |",
             "|---|---|---|---|---|---|---|"]
    table = Table(title=f"sweep {sweep}")
    for col in ("benchmark", "method", "setting", "seeds", "avg@k", "pass@k", "mean len"):
        table.add_column(col)
    for r in rows:
        cells = [r["benchmark"], r["method"], r["label"] or "", str(r["seeds"]),
                 f"{r['avg_at_k']:.3f} ± {r['avg_at_k_std']:.3f} (k={r['k']})",
                 f"{r['pass_at_k']:.3f} ± {r['pass_at_k_std']:.3f}", f"{r['mean_len']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
        table.add_row(*cells)
    lines += _set_averages(rows) + _left_out(catalog.damaged)
    out = write_text(out, "\n".join(lines) + "\n")
    Console(stderr=True).print(table)
    if catalog.damaged:
        Console(stderr=True, highlight=False).print(lines[-1], markup=False)
    return out
