"""`rlsweep gain SWEEP.yaml`: did RL improve the model it started from? Per setting and benchmark the start's avg@k,
each seed's final, and the paired final − start pooled over seeds and problems with its 95% bootstrap interval
(workflow/report/gain.py: the report's gain table). Exit 1 when a seed ends at or below the start or an interval
holds 0: the demo's claim, checked where it runs (tests/long/test_demo_command.py and
test_demo_gain.py, bench/demo_kernels.py). `--setting TEXT` (repeatable) keeps the settings whose label contains
every TEXT: one regime of a sweep, its methods without SFT."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from workflow.cli.common import err, results_root
from workflow.errors import UserError
from workflow.report.gain import gains
from workflow.sweep.expand import load_sweep


def cmd_gain(a) -> int:
    sweep = load_sweep(a.sweep_file)
    found = gains(sweep, results_root(a))
    if not found:
        raise UserError(f"{sweep.name}: no evaluations yet; run the sweep first (`snakemake --config "
                        f"sweep={a.sweep_file}`)")
    if a.setting:
        labels = sorted({g.label for g in found})
        found = [g for g in found if all(text in g.label for text in a.setting)]
        if not found:
            raise UserError(f"--setting {' '.join(a.setting)}: no setting of {sweep.name} has it in its label; its "
                            f"settings: {'; '.join(labels)}")
    table = Table("setting", "benchmark", "start", "final per seed", "final − start [95% interval]", "holds",
                  title=f"{sweep.name}: RL's gain over its start (avg@k)")
    short = []
    for g in found:
        bad = g.shortfalls()
        short += bad
        table.add_row(g.label, g.benchmark, "" if g.start is None else f"{g.start:.3f}", g.finals_text(),
                      g.diff_text(), "yes" if not bad else "no")
    Console(soft_wrap=True).print(table)
    for line in short:
        err.print(f"does not hold: {line}")
    return 1 if short else 0
