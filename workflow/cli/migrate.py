"""`rlsweep migrate`: results made before the shared store, moved into it (workflow/results/migrate.py)."""

from __future__ import annotations

from workflow.cli.common import err, results_path
from workflow.results.migrate import legacy_sweeps, migrate


def cmd_migrate(a) -> int:
    root = results_path(a)  # (not results_root: that migrates on its own)
    if not legacy_sweeps(root):
        err.print(f"{root}: nothing to migrate (every sweep's results are in the shared store)")
        return 0
    done = migrate(root)
    for m in done:
        err.print(str(m))
    return 1 if any(m.kept_back for m in done) else 0
