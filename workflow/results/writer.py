"""Rows -> Parquet files of the four tables, written atomically (workflow/atomic.py): a reader (DuckDB's glob
over `*.parquet`) never sees half a file, and an existing file stays intact until its replacement is complete."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from workflow.atomic import replacing
from workflow.layout import TABLE_FILE_RULE, parse_table_file, table_dir
from workflow.results import digest
from workflow.results.schemas import schema as table_schema


def to_arrow(table: str, rows: list[dict[str, Any]], allow_extra: bool = False) -> pa.Table:
    """Rows -> Arrow with the table's schema. Unknown columns are an error (a typo would silently vanish),
    except where the table takes extra columns (`runs`' flattened hyperparameters), which get inferred types."""
    schema = table_schema(table)
    known = set(schema.names)
    extra = sorted({k for r in rows for k in r} - known)
    if extra and not allow_extra:
        hint = ("; a method's own per-step number is declared on its card (Method(numbers=...), "
                "workflow/methods/base.py)" if table == "train_steps" else "")
        raise ValueError(f"{table}: unknown column(s) {extra}{hint}")
    columns = {name: pa.array([r.get(name) for r in rows], type=schema.field(name).type) for name in schema.names}
    for name in extra:
        columns[name] = pa.array([r.get(name) for r in rows])
    return pa.table(columns)


def _write_unsealed(data: pa.Table, sink) -> None:
    """`data` as Parquet with the digest's placeholder in its footer (what pq.write_table writes, and that)."""
    with pq.ParquetWriter(sink, data.schema) as w:
        w.write_table(data)
        w.add_key_value_metadata(digest.METADATA)


def parquet_bytes(data: pa.Table) -> bytes:
    """The bytes write_parquet would write (sealed), for a caller that puts them in place itself."""
    sink = pa.BufferOutputStream()
    _write_unsealed(data, sink)
    return digest.seal_bytes(sink.getvalue().to_pybytes())


def write_parquet(data: pa.Table, path: str | Path) -> Path:
    """One Parquet file, sealed with its digest (digest.py) and flushed to disk before it takes its final name."""
    with replacing(path) as tmp:
        _write_unsealed(data, tmp)
        digest.seal(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
    return Path(path)


def write_rows(results_root: str | Path, table: str, name: str, rows: list[dict[str, Any]]) -> Path:
    """A stage job's rows of `table`, in its file `name` (layout.runs_file, ...): the one way rows reach the tables,
    so a name the catalog would not take for a stage job's (and would leave out of every view) is refused here."""
    if parse_table_file(table, name) is None:
        raise ValueError(f"{table} file name {name!r} is no stage job's: {TABLE_FILE_RULE}")
    return write_parquet(to_arrow(table, rows, allow_extra=(table == "runs")),
                         table_dir(results_root, table) / f"{name}.parquet")
