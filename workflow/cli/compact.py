"""`rlsweep compact`: merge a sweep's finished stages' table files into a few packs, so queries stay fast."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from workflow.cli.common import results_root
from workflow.results.compaction import compact, compaction_line
from workflow.sweep.expand import load_sweep


def cmd_compact(a) -> int:
    if bool(a.sweep_file) == bool(a.sweep):
        print("error: name the sweep: rlsweep compact SWEEP.yaml, or rlsweep compact --sweep NAME", file=sys.stderr)
        return 2
    name, root = load_sweep(a.sweep_file).name if a.sweep_file else a.sweep, results_root(a)
    if not (root / name / "tables").is_dir():
        print(f"error: no result tables for sweep {name!r} under {root}", file=sys.stderr)
        return 2
    done = compact(root, name)
    table = Table(title=f"{name}: compacted", title_justify="left")
    for column in ("table", "files", "packed", "merged packs", "new rows", "left", "s"):
        table.add_column(column, justify="left" if column == "table" else "right")
    for c in done:
        table.add_row(c.table, f"{c.files_before} → {c.files_after}", str(c.packed), str(c.merged), f"{c.rows:,}",
                      str(c.skipped), f"{c.seconds:.2f}")
    Console(highlight=False).print(table)
    print(compaction_line(done), file=sys.stderr)
    return 0
