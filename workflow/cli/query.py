"""`rlsweep query`: read-only SQL over the result tables, any answer printable."""

from __future__ import annotations

import sys
from pathlib import Path

from workflow.cli.common import results_root
from workflow.results.catalog import Catalog, Damaged, QueryLimits
from workflow.results.display import print_table
from workflow.results.membership import sweeps_of


def cmd_query(a) -> int:
    catalog = Catalog(results_root(a), a.sweep)
    try:
        answer = catalog.query(a.sql, QueryLimits(a.timeout, a.memory))
    finally:  # (after the query: one that DuckDB could not decode checks every file again, and may find more)
        warn_damaged(catalog.left_out, root=catalog.root)
    print_table(answer, a.format)
    return 0


def pack_contents(d: Damaged, root: Path | None) -> str:
    """Whose rows a damaged pack held: how many stage jobs, and of which sweeps (from its manifest)."""
    if d.holds is None:
        return ("a pack, of many stage jobs' rows: which ones, neither a manifest nor its footer says (a pack from "
                "before manifests); `rlsweep doctor` lists each stage job whose rows are missing")
    by_sweep = sweeps_of(root, d.holds) if root is not None else {}
    planned = {key for keys in by_sweep.values() for key in keys}
    sweeps = [f"{sweep} ({len(keys)})" for sweep, keys in by_sweep.items()]
    if len(planned) < len(d.holds):
        sweeps.append(f"no sweep's ({len(d.holds) - len(planned)})")
    return f"a pack: the rows of {len(d.holds)} stage jobs, of sweep(s) {', '.join(sweeps) or 'none'}"


def warn_damaged(damaged: list[Damaged], runs: dict[Damaged, list[str]] | None = None,
                 root: Path | None = None) -> None:
    """One line on stderr per file the query left out (plain print: a path may hold rich markup). `root`: the
    results directory, to say which sweeps a damaged pack's stage jobs belong to."""
    for d in damaged:
        if d.is_pack and not d.foreign:
            print(f"warning: left out damaged {d.table} pack {d.path} ({pack_contents(d, root)}): {d.reason} "
                  "(`rlsweep doctor` names the stage jobs and says how their rows come back)", file=sys.stderr)
            continue
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
