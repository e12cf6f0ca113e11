"""`rlsweep doctor`: damaged or inconsistent results, and how to recompute them."""

from __future__ import annotations

import sys

from workflow.cli.common import results_root
from workflow.results.doctor import examine, quarantine, report_lines, summary_line
from workflow.sweep.expand import load_sweep


def cmd_doctor(a) -> int:
    if bool(a.sweep_file) == bool(a.sweep):
        print("error: name the sweep: rlsweep doctor SWEEP.yaml, or rlsweep doctor --sweep NAME", file=sys.stderr)
        return 2
    sweep = load_sweep(a.sweep_file) if a.sweep_file else None
    name, root = sweep.name if sweep else a.sweep, results_root(a)
    if not (root / name).is_dir():  # (snakemake makes it when it plans the sweep: results/<sweep>/members/)
        print(f"error: no results for sweep {name!r} under {root}", file=sys.stderr)
        return 2
    if a.also and not a.fix:
        print("error: --also names sweeps whose stage jobs --fix may mark too: give --fix with it", file=sys.stderr)
        return 2
    unknown = [s for s in a.also if not (root / s).is_dir()]
    if unknown:
        print(f"error: --also {unknown[0]}: no results for sweep {unknown[0]!r} under {root}", file=sys.stderr)
        return 2
    report = examine(root, name, a.sweep_file, sweep.members if sweep else None, also=tuple(a.also))
    moved = quarantine(report)[1] if a.fix and report.problems else None
    for line in report_lines(report, moved):
        print(line)
    print(summary_line(report, fixed=moved is not None), file=sys.stderr)
    return 1 if report.problems else 0  # (found problems: 1, fixed or not, as scripts expect)
