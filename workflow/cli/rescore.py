"""`rlsweep rescore SWEEP.yaml --graders math_equal dapo`: other graders judge the sweep's stored responses again,
without generating (rule rescore through Snakemake, so a grader that already judged an eval job is not run again),
then the report is written anew with their verdicts beside each benchmark's own (its "Graders" section)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from workflow.cli.common import err, results_root
from workflow.errors import UserError
from workflow.benchmarks import graders
from workflow.layout import done_path, rescore_path
from workflow.report.queries import own_grader_sql
from workflow.results.catalog import Catalog, sql_str
from workflow.design.recorded import add_recorded_runs
from workflow.sweep.expand import load_sweep

SNAKEFILE = Path(__file__).resolve().parents[2] / "Snakefile"

PER_GRADER = """
    SELECT benchmark, grader, count(*) AS samples, avg(correct::INT) AS accuracy, count(DISTINCT run_id) AS runs
    FROM (SELECT run_id, benchmark, coalesce(grader, {own}) || ' (own)' AS grader, correct FROM eval_samples
          UNION ALL SELECT run_id, benchmark, grader, correct FROM eval_grades)
    WHERE run_id IN ({runs})
    GROUP BY ALL ORDER BY benchmark, grader
"""


def cmd_rescore(a) -> int:
    unknown = [g for g in a.graders if g not in graders.GRADERS]
    if unknown:
        raise UserError(f"--graders: unknown grader(s) {', '.join(unknown)}; known: {', '.join(graders.GRADERS)}")
    sweep = load_sweep(a.sweep_file)
    root = results_root(a)
    add_recorded_runs(sweep, root)  # a study's trials, a design's rounds (as the Snakefile adds them)
    targets, waiting = [], 0
    for r in sweep.runs:
        for step, group, grader in r.rescore_jobs(a.graders):
            if done_path(root, "eval", r.eval_id, r.run_id, step, group).is_file():
                targets.append(str(rescore_path(root, r.eval_id, r.run_id, step, group, grader)))
            else:
                waiting += 1
    if not targets:
        raise UserError(f"nothing to rescore: none of {sweep.name}'s {waiting} rescore job(s) has a finished "
                        f"evaluation under {root} (or no benchmark of the sweep is judged by "
                        f"{', '.join(a.graders)}: math graders judge math benchmarks, mc_* multiple choice)")
    if waiting:
        err.print(f"[yellow]{waiting} rescore job(s) wait for evaluations that have not finished: `snakemake` "
                  "runs them after their evaluation once the sweep lists the graders in eval.graders[/]")
    argv = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--config", f"sweep={sweep.path}",
            f"results={root}", f"graders={','.join(a.graders)}", "--allowed-rules", "rescore",
            "--cores", str(a.cores), *shlex.split(a.snakemake), *targets]
    err.print(f"rescore: {len(targets)} job(s) ({', '.join(a.graders)}) over {sweep.name}'s stored responses")
    code = subprocess.run(argv).returncode
    if code:
        return code
    runs = ", ".join(sql_str(r.run_id) for r in sweep.runs)
    catalog = Catalog(root, sweep.name, planned=sweep.members())
    table = catalog.query(PER_GRADER.format(runs=runs, own=own_grader_sql()))
    t = Table(title=f"{sweep.name}: accuracy per grader (every evaluated step)")
    for col in table.column_names:
        t.add_column(col, justify="left" if col in ("benchmark", "grader") else "right")
    for row in table.to_pylist():
        t.add_row(*[f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()])
    Console(highlight=False).print(t)
    from workflow.report.build import write_report  # the report's disagreement section, with the new verdicts
    err.print(f"report: {write_report(sweep, root)}")
    if sweep.spec.tracking.backends:  # the new verdicts into the sweep's trackers, at the steps they judged
        from workflow.tracking.backfill import track
        track(root, sweep.name, {n: sweep.spec.tracking.model_dump(mode="json")[n] for n in
                                 sweep.spec.tracking.backends}, planned=sweep.members(), say=err.print)
    return 0
