"""`rlsweep compact`: merge the finished stages' table files (every sweep's) into a few packs, so queries stay fast."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from workflow.cli.common import results_root
from workflow.layout import tables_dir
from workflow.results.compaction import compact, compaction_line
from workflow.results.migrate import migrate_if_needed


def cmd_compact(a) -> int:
    root = results_root(a)
    migrate_if_needed(root)
    if not tables_dir(root).is_dir():
        print(f"error: no result tables under {root}", file=sys.stderr)
        return 2
    done = compact(root)
    table = Table(title=f"{tables_dir(root)}: compacted", title_justify="left")
    for column in ("table", "files", "packed", "merged packs", "new rows", "left", "s"):
        table.add_column(column, justify="left" if column == "table" else "right")
    for c in done:
        table.add_row(c.table, f"{c.files_before} → {c.files_after}", str(c.packed), str(c.merged), f"{c.rows:,}",
                      str(c.skipped), f"{c.seconds:.2f}")
    Console(highlight=False).print(table)
    print(compaction_line(done), file=sys.stderr)
    return 1 if any(c.refused for c in done) else 0  # (damage found: `rlsweep doctor` says whose rows, and what to do)
