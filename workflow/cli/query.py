"""`rlsweep query`: read-only SQL over the result tables, any answer printable."""

from __future__ import annotations

import sys

from workflow.cli.common import results_root
from workflow.results.catalog import Catalog, Damaged, QueryLimits
from workflow.results.display import print_table


def cmd_query(a) -> int:
    catalog = Catalog(results_root(a), a.sweep)
    warn_damaged(catalog.damaged_members + catalog.damaged)
    print_table(catalog.query(a.sql, QueryLimits(a.timeout, a.memory)), a.format)
    return 0


def warn_damaged(damaged: list[Damaged], runs: dict[Damaged, list[str]] | None = None) -> None:
    """One line on stderr per table file the query left out (plain print: a path may hold rich markup)."""
    for d in damaged:
        if d.table == "members":  # a sweep's record of its stage jobs (results/membership.py), not a table's rows
            print(f"warning: left out unreadable membership record {d.path}: {d.reason} (its sweep's views lack the "
                  "stage jobs it lists; planning the sweep again rewrites it: `snakemake -n --config sweep=SWEEP.yaml`, "
                  "or `rlsweep doctor SWEEP.yaml --fix`)", file=sys.stderr)
            continue
        whose = f" ({d.owner})" if d.owner else ""
        affects = f"; affects run(s) {', '.join(runs[d])}" if runs and runs.get(d) else ""
        print(f"warning: left out unreadable {d.table} file {d.path}{whose}: {d.reason}{affects} "
              "(`rlsweep doctor` says how to recompute it)", file=sys.stderr)
