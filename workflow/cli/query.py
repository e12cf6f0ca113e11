"""`rlsweep query`: read-only SQL over the result tables, any answer printable."""

from __future__ import annotations

import sys

from workflow.cli.common import results_root
from workflow.results.catalog import Catalog, Damaged, QueryLimits
from workflow.results.display import print_table


def cmd_query(a) -> int:
    catalog = Catalog(results_root(a), a.sweep)
    warn_damaged(catalog.left_out)
    print_table(catalog.query(a.sql, QueryLimits(a.timeout, a.memory)), a.format)
    return 0


def warn_damaged(damaged: list[Damaged], runs: dict[Damaged, list[str]] | None = None) -> None:
    """One line on stderr per file the query left out (plain print: a path may hold rich markup)."""
    for d in damaged:
        if d.foreign:  # readable, but no stage job's: what wrote it is not rlsweep, so there is nothing to recompute
            print(f"warning: left out {d.table} file {d.path}: {d.reason}; `rlsweep doctor --fix` moves it to the "
                  "store's quarantine", file=sys.stderr)
            continue
        if d.table == "members":  # a sweep's record of its stage jobs (results/membership.py), not a table's rows
            sweep = d.path.parent.parent.name  # results/<sweep>/members/<digest>.parquet
            print(f"warning: left out unreadable membership record {d.path}: {d.reason} (its sweep's views lack the "
                  f"stage jobs it lists; `rlsweep doctor --sweep {sweep} --fix` rebuilds it from the runs rows, "
                  "`rlsweep doctor SWEEP.yaml --fix` from the sweep file's plan)", file=sys.stderr)
            continue
        if d.owner is None:  # unreadable, and no stage job's name either: nothing to recompute
            print(f"warning: left out unreadable {d.table} file {d.path}: {d.reason}; no stage job writes this name: "
                  "`rlsweep doctor --fix` moves it to the store's quarantine", file=sys.stderr)
            continue
        affects = f"; affects run(s) {', '.join(runs[d])}" if runs and runs.get(d) else ""
        print(f"warning: left out unreadable {d.table} file {d.path} ({d.owner}): {d.reason}{affects} "
              "(`rlsweep doctor` says how to recompute it)", file=sys.stderr)
