"""Which table files' bytes were already checked against their digest (digest.py), so a query does not hash them again.

A verdict holds for one file identity: device, inode, size, mtime and ctime. A rewrite is a rename (a new inode);
bytes changed in place move mtime, and ctime too, which no user call can set back (`touch -r` restores mtime only). A
copied results directory is new inodes, checked again. What no identity sees is bytes that change on the disk
beneath the file system (bit rot): `rlsweep doctor` and compaction check every file in full, never asking here, and
a query that DuckDB cannot decode checks its files again in full (catalog.py).

The verdicts live outside the results directory, which a query never writes: `$RLSWEEP_VERDICT_CACHE`, else
`$XDG_CACHE_HOME/rlsweep/verified`, else `~/.cache/rlsweep/verified`, one JSON file per results directory (by the
hash of its path); `RLSWEEP_VERDICT_CACHE=off` checks every file at every query. A cache that cannot be read or written
(a read-only home) costs only the hashing: it is never a reason to fail. Two processes saving at once may lose each
other's new verdicts (each writes its file whole, by rename): those files are checked once more.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from workflow.results import digest

OFF = "off"


def cache_dir() -> Path | None:
    chosen = os.environ.get("RLSWEEP_VERDICT_CACHE")
    if chosen == OFF:
        return None
    if chosen:
        return Path(chosen)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlsweep" / "verified"


def identity(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class Verdicts:
    """The checked identities of one results directory's table files, by their path relative to it."""

    def __init__(self, root: Path):
        self.root = root
        directory = cache_dir()
        self.path = (directory / f"{hashlib.sha256(str(root).encode()).hexdigest()[:16]}.json"
                     if directory is not None else None)
        self.known: dict[str, list] = self._load()
        self.added: dict[str, list] = {}

    def _load(self) -> dict[str, list]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        files = data.get("files") if isinstance(data, dict) and data.get("root") == str(self.root) else None
        return files if isinstance(files, dict) else {}

    def _key(self, path: Path) -> str:
        return str(path.relative_to(self.root)) if self.root in path.parents else str(path)

    def trusted(self, path: Path, st: os.stat_result, digest: str | None = None) -> bool:
        """Whether this very file (its identity now) was checked and found intact (with this digest, when given)."""
        entry = self.known.get(self._key(path))
        return (isinstance(entry, list) and len(entry) == 6 and entry[:5] == identity(st)
                and (digest is None or entry[5] == digest))

    def remember(self, path: Path, st: os.stat_result, digest: str) -> None:
        entry = [*identity(st), digest]
        self.known[self._key(path)] = self.added[self._key(path)] = entry

    def forget(self, path: Path) -> None:
        self.known.pop(self._key(path), None)
        self.added.pop(self._key(path), None)

    def save(self, listed: set[str] | None = None) -> None:
        """Write the new verdicts (merged into what another process saved meanwhile). `listed`: every table file
        there is now (paths relative to the results): entries of files no longer there are dropped, and the cache is
        written without them even with nothing new (after a compaction, the 41,000 small files' verdicts of a
        1,000-run sweep took a query ~0.15 s to read)."""
        stale = listed is not None and any(k not in listed for k in self.known)
        if self.path is None or not (self.added or stale):
            return
        merged = {**self._load(), **self.added}
        if listed is not None:
            merged = {k: v for k, v in merged.items() if k in listed}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.parent / f".{self.path.name}.tmp-{os.getpid()}"
            tmp.write_text(json.dumps({"root": str(self.root), "files": merged}, separators=(",", ":")))
            os.replace(tmp, self.path)
        except OSError:
            return
        self.added = {}
        if listed is not None:
            self.known = {k: v for k, v in self.known.items() if k in listed}


def check_file(path: Path, fd: int, verdicts: Verdicts | None = None, deep: bool = False) -> str | None:
    """Why the table file open as `fd` (at `path`) is not to be believed (None: it is): its digest does not match
    (digest.py). Checked once per identity when `verdicts` are given; `deep`, every time, and a file from before
    digests is then also decoded in full. OSError / ArrowException propagate (the caller words them)."""
    st = os.fstat(fd)
    if not deep and verdicts is not None and verdicts.trusted(path, st):
        return None
    verdict = digest.check(fd, st.st_size)
    if not verdict.ok:
        if verdicts is not None:
            verdicts.forget(path)
        return verdict.reason
    if verdict.sealed and verdicts is not None:
        verdicts.remember(path, st, verdict.digest)
    elif not verdict.sealed and deep:
        import pyarrow.parquet as pq  # noqa: PLC0415 - (only doctor's deep read of a file from before digests)
        from workflow.results.files import arrow_file  # noqa: PLC0415
        with arrow_file(fd) as f:
            pq.ParquetFile(f).read()
    return None
