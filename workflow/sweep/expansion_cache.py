"""A big sweep's expanded runs, kept on this machine so that reading the same sweep again does not validate and hash
its runs again.

Snakemake reads the sweep for every `snakemake -n`, every run, every `rlsweep plan` / `status` / `report`: at 10,000
runs the expansion (validating each grid point, hashing each run's stage configs) is about a second of each. It is a
pure function of
  - the sweep's spec (its canonical JSON: what the file says, after the schema read it),
  - the project's code and the installed packages (the fingerprints workflow/sweep/passed_checks.py keys its markers
    by), and the source files of any installed plug-in (entry points in the `rlsweep.*` groups),
  - and the file system, for the dataset and benchmark files the runs name: checked again on every hit (a file that is
    gone now makes a miss, and the expansion that follows names it exactly as it would have).
So an expansion that succeeded is written once under a hash of the first two, and read back instead while none of them
changes. A failed expansion is never written. Only sweeps of at least CACHED_FROM runs are kept: a smaller one expands
faster than its fingerprints are taken.

The files are pickles, which run code when read: they live beside the checks' markers (`$RLSWEEP_CHECK_CACHE`, else
`$XDG_CACHE_HOME/rlsweep/checks`, else `~/.cache/rlsweep/checks`; `RLSWEEP_CHECK_CACHE=off` turns both off), in a
folder made private to its owner, and a file that another user owns or could have written is never read. At most KEEP
files are kept (the least recently read go first); an unreadable or stale-format one is a miss, written anew.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import pickle
import stat
import tempfile
from functools import lru_cache
from pathlib import Path

from workflow.hub import record_file_problem
from workflow.registry import GROUP_PREFIX
from workflow.sweep.passed_checks import cache_dir, code_fingerprint, environment_fingerprint
from workflow.sweep.spec import SweepSpec

# (the runs are workflow/sweep/expand.py's Run records, which this module only pickles: typed `list` here, since
# expand.py, which reads and writes through this module, is the one that knows them)

FORMAT = 1  # of the pickled payload: bump when Run or what it holds changes shape
CACHED_FROM = 500  # runs (grid points x seeds, before exclude): ~50 ms of expansion, the fingerprints' cost
KEEP = 32  # expansions kept on the machine


def folder() -> Path | None:
    root = cache_dir()
    return None if root is None else root / "expansions"


def worth_caching(planned_runs: int) -> bool:
    return planned_runs >= CACHED_FROM and folder() is not None


@lru_cache(maxsize=1)
def plugin_fingerprint() -> str:
    """Every installed plug-in's entry points and its top-level package's source files (path, size, mtime): an
    editable install's edit changes no distribution's name, so the environment's fingerprint alone would miss it."""
    h = hashlib.sha256()
    tops = set()
    ours = sorted({(ep.group, ep.name, ep.value) for dist in importlib.metadata.distributions()
                   for ep in dist.entry_points if ep.group.startswith(GROUP_PREFIX)})
    for group, name, value in ours:
        h.update(f"{group}\0{name}\0{value}\n".encode())
        tops.add(value.split(":")[0].split(".")[0])
    for top in sorted(tops - {"workflow"}):  # (our own built-ins are the code fingerprint's)
        spec = importlib.util.find_spec(top)  # a top-level name: finding it imports nothing
        places = list(spec.submodule_search_locations or []) if spec else []
        files = [Path(spec.origin)] if spec and spec.origin and not places else []
        files += [p for place in places for p in sorted(Path(place).rglob("*.py"))]
        for p in files:
            st = p.stat()
            h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _path(spec: SweepSpec) -> Path | None:
    where = folder()
    if where is None:
        return None
    key = hashlib.sha256("\0".join([str(FORMAT), code_fingerprint(), environment_fingerprint(), plugin_fingerprint(),
                                    spec.model_dump_json()]).encode())
    return where / f"{key.hexdigest()[:40]}.pickle"


def _private(path: Path) -> bool:
    """Whether only this user could have written `path` (and its folder): the condition for unpickling it."""
    for p in (path.parent, path):
        st = p.stat()
        if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return False
    return True


def load(spec: SweepSpec) -> list | None:
    """The runs of an earlier expansion of this spec with this code, these packages and plug-ins; None: expand it
    (nothing kept, unreadable, not private, or a file the runs name is missing now)."""
    try:
        path = _path(spec)  # (a plug-in's file gone while its fingerprint is taken: a miss, like any other failure)
        if path is None or not path.is_file() or not _private(path):
            return None
        with path.open("rb") as f:
            payload = pickle.load(f)
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            return None
        if any(record_file_problem(p) for p in payload["files"]):
            return None
        os.utime(path)  # read now: the last to be pruned
        return payload["runs"]
    except Exception:  # noqa: BLE001 - a damaged or foreign file is a miss: expanding is always right
        return None


def save(spec: SweepSpec, runs: list) -> None:
    """Keep a successful expansion (atomically: a reader sees the whole file or none). Never fails a sweep: a cache
    that cannot be written costs the next read the expansion."""
    tmp = None
    try:
        path = _path(spec)
        if path is None:
            return
        files = sorted({p for r in runs for p in r.config.named_files().values()})
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump({"format": FORMAT, "runs": runs, "files": files}, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
        tmp = None
        _prune(path.parent)
    except (OSError, ValueError, pickle.PicklingError):  # (ValueError: find_spec of a broken plug-in's name)
        pass
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _prune(where: Path) -> None:
    kept = sorted(where.glob("*.pickle"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in kept[KEEP:]:
        old.unlink(missing_ok=True)
