"""Atomic Parquet writes: a reader (DuckDB's glob over `*.parquet`) never sees half a file.

The file is written as `.<name>.tmp-<pid>` in the same directory (hidden, and not matching `*.parquet`), flushed
to disk, then `os.replace`d onto its final name, which is atomic on POSIX file systems (NFS included, for a rename
within one directory). A crash mid-write leaves at most a hidden temporary; an existing file of the same name
stays intact until the new one is complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from workflow.results.schemas import TABLES


def table_dir(results_root: str | Path, sweep: str, table: str) -> Path:
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}")
    return Path(results_root) / sweep / "tables" / table


def to_arrow(table: str, rows: list[dict[str, Any]], allow_extra: bool = False) -> pa.Table:
    """Rows -> Arrow with the table's schema. Unknown columns are an error (a typo would silently vanish),
    except where the table takes extra columns (`runs`' flattened hyperparameters), which get inferred types."""
    schema = TABLES[table]
    known = set(schema.names)
    extra = sorted({k for r in rows for k in r} - known)
    if extra and not allow_extra:
        raise ValueError(f"{table}: unknown column(s) {extra}")
    columns = {name: pa.array([r.get(name) for r in rows], type=schema.field(name).type) for name in schema.names}
    for name in extra:
        columns[name] = pa.array([r.get(name) for r in rows])
    return pa.table(columns)


def write_atomic(data: pa.Table, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    try:
        pq.write_table(data, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def write_rows(results_root: str | Path, sweep: str, table: str, name: str, rows: list[dict[str, Any]]) -> Path:
    return write_atomic(to_arrow(table, rows, allow_extra=(table == "runs")),
                        table_dir(results_root, sweep, table) / f"{name}.parquet")


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """JSON written to a temporary sibling and renamed into place: readers see the old file or the new one."""
    path = Path(path)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True))
    os.replace(tmp, path)
