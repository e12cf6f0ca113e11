"""What every rlsweep command shares: where the results are, and the console for notes (stderr)."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console

err = Console(stderr=True, highlight=False)


def results_root(a) -> Path:
    return Path(a.results or os.environ.get("RLSWEEP_RESULTS", "results"))
