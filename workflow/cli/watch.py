"""`rlsweep watch`: the sweep while it runs (workflow/watch/). Reads only: it never writes into the results or
takes a lock, so it runs beside `snakemake` (from a login node beside `snakemake --profile slurm`)."""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.live import Live

from workflow.cli.common import err, results_path
from workflow.design.recorded import add_recorded_runs
from workflow.sweep.expand import load_sweep
from workflow.watch.snapshot import Watcher
from workflow.watch.view import plain, rich_view, sort_key

CHROME_LINES = 8  # the table's title, header and borders and the footer: what the runs' lines leave of the screen


def cmd_watch(a) -> int:
    if a.every <= 0:
        err.print(f"[red]error:[/] --every {a.every}: seconds between refreshes, > 0")
        return 2
    sweep = load_sweep(a.sweep_file)
    root = results_path(a)  # (not results_root: that may migrate old results, and watch writes nothing)
    add_recorded_runs(sweep, root)  # a study's trials, a design's rounds: started so far
    watcher = Watcher(sweep, root)
    if a.sort:
        try:
            sort_key(a.sort, [*{n for r in sweep.runs for n in watcher.headlines[r.run_id]}, "loss"])
        except ValueError as e:
            err.print(f"[red]error:[/] {e}")
            return 2
    console = Console(highlight=False)
    if a.once or not console.is_terminal:
        snap = watcher.snapshot()
        sys.stdout.write(plain(snap, a.lines, a.sort))
        if a.svg:
            recorder = Console(record=True, width=200, highlight=False, file=open("/dev/null", "w"))  # noqa: SIM115
            recorder.print(rich_view(snap, a.lines, a.sort))
            recorder.save_svg(a.svg, title=f"rlsweep watch {a.sweep_file}")
        return 1 if snap.failed else 0
    try:
        with Live(console=console, auto_refresh=False, screen=False, transient=False) as live:
            while True:
                snap = watcher.snapshot()
                lines = a.lines or max(console.size.height - CHROME_LINES - min(len(snap.problems), 6), 5)
                live.update(rich_view(snap, lines, a.sort), refresh=True)
                time.sleep(a.every)
    except KeyboardInterrupt:  # Ctrl-C: leave the last view on the screen, no traceback
        return 0
