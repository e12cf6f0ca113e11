"""Write-to-a-temporary-then-rename: a reader (DuckDB's glob, Snakemake, a resuming stage) sees the old file or
directory or the complete new one, never half of one.

The temporary is a hidden sibling `.<name>.tmp-<pid>` in the same directory (so it never matches `*.parquet` or
`step_*`, and the rename stays within one file system, where `os.replace` is atomic on POSIX, NFS included).
A crash leaves at most a hidden temporary; an existing file of the same name stays intact until the new one is
complete. Directories (checkpoints) work the same way, but an existing directory is never replaced: callers
keep the one already there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


def temporary_sibling(path: Path) -> Path:
    return path.parent / f".{path.name}.tmp-{os.getpid()}"


_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)$")


def parse_temporary(path: Path) -> tuple[str, int] | None:
    """(the name it was to take, the writing process's pid) of a `temporary_sibling`; None for any other file."""
    m = _TEMPORARY.match(Path(path).name)
    return (m["name"], int(m["pid"])) if m else None


def discard(path: Path) -> None:
    """Remove a file or directory (a temporary) if it is there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling of `path` to write a file or a directory into; when the block ends without an
    error it is renamed onto `path`, when it raises it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(path)
    discard(tmp)  # left by an earlier process with the same pid
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        discard(tmp)


def write_bytes(path: str | Path, data: bytes) -> Path:
    with replacing(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: str | Path, text: str) -> Path:
    with replacing(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_json(path: str | Path, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=1, sort_keys=True))
