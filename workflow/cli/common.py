"""What every rlsweep command shares: where the results are, and the console for notes (stderr)."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console

# notes are lines of a log: never broken at the terminal width (a path cut in two can neither be searched nor
# pasted), the terminal wraps them for display
err = Console(stderr=True, highlight=False, soft_wrap=True)


def results_path(a) -> Path:
    """The results directory as given: --results, $RLSWEEP_RESULTS, ./results."""
    return Path(a.results or os.environ.get("RLSWEEP_RESULTS", "results"))


def results_root(a) -> Path:
    """results_path, with results made before the shared store moved into it first (results/migrate.py: nothing to
    do is a look at its top level)."""
    from workflow.results.migrate import migrate_if_needed

    root = results_path(a)
    migrate_if_needed(root)
    return root
