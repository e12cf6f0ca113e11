"""Engine checks a run's config already passed on this machine, so that reading a sweep does not pay for them again.

An engine's heavy checks (`EngineTraits.sweep_problems`: verl composes its Hydra config and instantiates its
dataclasses, ~4 s of imports and ~1-2 s a run on 2 cores) run every time a sweep loads: `rlsweep status`, `plan`,
`report`, Snakemake's DAG. A config that passed them passes them again as long as nothing they read changed: the
config itself (its RL seed aside, which the checks judge by its type alone: workflow/sweep/expand.py), the project's
code, and the installed packages. Each pass leaves an empty marker named by a hash of those three; a load that finds
its marker skips the checks. Failures are never remembered (the next load runs the
checks again and names the key). The markers live in `$RLSWEEP_CHECK_CACHE`, else `$XDG_CACHE_HOME/rlsweep/checks`,
else `~/.cache/rlsweep/checks`; `RLSWEEP_CHECK_CACHE=off` runs every check every time. A marker that cannot be
written (a read-only home) only costs the next load the checks.
"""

from __future__ import annotations

import hashlib
import os
import sys
from functools import lru_cache
from pathlib import Path

import workflow

OFF = "off"


def cache_dir() -> Path | None:
    """Where the markers live; None when the cache is off."""
    chosen = os.environ.get("RLSWEEP_CHECK_CACHE")
    if chosen == OFF:
        return None
    if chosen:
        return Path(chosen)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlsweep" / "checks"


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Every Python file of the package, by path and content (~20 ms): any edit is a new fingerprint."""
    root = Path(workflow.__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@lru_cache(maxsize=1)
def environment_fingerprint() -> str:
    """The interpreter and every installed distribution with its version (the names of the `*.dist-info` folders on
    sys.path: an install, upgrade or removal renames one), without importing anything."""
    names = [sys.version]
    for entry in sys.path:
        try:
            names += sorted(e.name for e in os.scandir(entry or ".") if e.name.endswith((".dist-info", ".egg-info")))
        except OSError:  # a zip or a folder that is gone
            continue
    return hashlib.sha256("\n".join(names).encode()).hexdigest()


def _marker(engine: str, config_json: str) -> Path | None:
    root = cache_dir()
    if root is None:
        return None
    key = hashlib.sha256("\0".join([engine, code_fingerprint(), environment_fingerprint(), config_json]).encode())
    return root / key.hexdigest()[:40]


def passed_before(engine: str, config_json: str) -> bool:
    """Whether this engine's checks passed this exact config (as JSON) with this code and these packages."""
    marker = _marker(engine, config_json)
    return marker is not None and marker.is_file()


def remember_passed(engine: str, config_json: str) -> None:
    marker = _marker(engine, config_json)
    if marker is None:
        return
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:  # an optimisation only: the next load runs the checks again
        pass
