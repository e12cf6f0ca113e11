"""`rlsweep report SWEEP.yaml`: the sweep's report from its tables (workflow/report/), in results/<sweep>/report/."""

from __future__ import annotations

from workflow.cli.common import err, results_root
from workflow.report.build import write_report
from workflow.design.recorded import add_recorded_runs
from workflow.sweep.expand import load_sweep


def cmd_report(a) -> int:
    sweep = load_sweep(a.sweep_file)
    root = results_root(a)
    add_recorded_runs(sweep, root)  # a study's trials, a design's rounds: started so far
    index = write_report(sweep, root)
    err.print(f"report: {index} (and report.md, queries.sql, figures/ next to it)")
    return 0
