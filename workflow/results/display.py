"""Printing a query's answer: every Arrow type in every format, and wide answers kept readable.

    table    a grid when it fits the terminal; otherwise one record per block (as `records`), with a note
    records  one block per row: `column  value` lines (psql's expanded display), for wide answers like `runs`
    csv      RFC 4180; lists and structs as JSON text in their cell
    json     a list of objects; lists and structs as JSON arrays / objects
"""

from __future__ import annotations

import decimal
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

FORMATS = ("table", "records", "csv", "json")
_MAX_CELL = 60  # characters of one cell in the grid layout; longer values are cut (records show them whole)


def print_table(table: pa.Table, fmt: str = "table", *, width: int | None = None) -> None:
    """Write `table` to stdout in `fmt`; the row count and layout notes go to stderr. `width`: the terminal's
    columns (default: what rich detects, 80 when stdout is not a terminal)."""
    if fmt == "csv":
        _print_csv(table)
    elif fmt == "json":
        print(json.dumps(table.to_pylist(), default=json_value, indent=1))
    else:
        from rich.console import Console  # ~50 ms; only the human formats need it
        out, err = Console(highlight=False, width=width), Console(stderr=True, highlight=False)
        rows = list(zip(*(c.to_pylist() for c in table.columns)))  # tuples: repeated column names survive
        if fmt == "table" and _grid_width(table.column_names, rows) > out.width:
            err.print(f"[dim]{table.num_columns} columns do not fit {out.width} characters: one record per block "
                      "(--format csv or json for all of it, or SELECT fewer columns)[/]")
            fmt = "records"
        if fmt == "records":
            _print_records(out, table.column_names, rows)
        else:
            _print_grid(out, table.column_names, rows)
        err.print(f"[dim]{table.num_rows} row{'s' if table.num_rows != 1 else ''}[/]")


def json_value(v):
    """JSON for what Arrow hands back beyond JSON's types: DuckDB's HUGEINT counts arrive as Decimal."""
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, bytes):
        return v.hex()
    return str(v)  # timestamps, dates


def cell_text(v) -> str:
    """One value as a person reads it: floats to 6 significant digits, lists and structs as JSON."""
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, dict)):
        return json.dumps(v, default=json_value)
    return str(v)


def _print_csv(table: pa.Table) -> None:
    import pyarrow as pa  # the formats' own imports: `rlsweep` parses its arguments without them
    import pyarrow.csv as pacsv
    nested = [i for i, f in enumerate(table.schema) if pa.types.is_nested(f.type)]
    for i in nested:  # the CSV writer has no text for lists / structs: their JSON, as in the json format
        values = [None if v is None else json.dumps(v, default=json_value) for v in table.column(i).to_pylist()]
        table = table.set_column(i, table.field(i).name, pa.array(values, pa.string()))
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink)
    sys.stdout.write(sink.getvalue().to_pybytes().decode())


def _grid_width(columns: list[str], rows: list[tuple]) -> int:
    """Characters the grid needs: each column as wide as its header or its longest (cut) cell, plus borders."""
    widths = [len(c) for c in columns]
    for row in rows[:1000]:  # enough rows to judge the layout
        for i, v in enumerate(row):
            widths[i] = max(widths[i], min(len(cell_text(v)) if v is not None else 4, _MAX_CELL))
    return sum(widths) + 3 * len(columns) + 1


def _print_grid(out, columns: list[str], rows: list[tuple]) -> None:
    from rich.table import Table
    t = Table(show_lines=False)
    for name in columns:
        t.add_column(name, overflow="fold")
    for row in rows:
        t.add_row(*("[dim]null[/]" if v is None else _cut(cell_text(v)) for v in row))
    out.print(t)


def _print_records(out, columns: list[str], rows: list[tuple]) -> None:
    from rich.markup import escape
    pad = max((len(c) for c in columns), default=0)
    for n, row in enumerate(rows, 1):
        out.print(f"[bold]-- record {n} " + "-" * max(0, min(out.width, 80) - 13 - len(str(n))) + "[/]")
        for name, v in zip(columns, row):
            value = "[dim]null[/]" if v is None else escape(cell_text(v))
            out.print(f"[cyan]{name:<{pad}}[/]  {value}", soft_wrap=True)


def _cut(text: str) -> str:
    from rich.markup import escape
    return escape(text if len(text) <= _MAX_CELL else text[:_MAX_CELL - 1] + "…")
