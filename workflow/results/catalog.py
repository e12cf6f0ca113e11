"""DuckDB over the Parquet tables: views `runs`, `train_steps`, `eval_samples`, `eval_scores`, read-only.

Read-only is enforced twice: only SELECT / EXPLAIN / DESCRIBE-style statements are accepted (no COPY ... TO, no
CREATE, no ATTACH), and the connection may read files under the results directory only.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from workflow.results.schemas import TABLES

_ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


class QueryError(Exception):
    pass


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def connect(results_root: str | Path = "results", sweep: str | None = None) -> duckdb.DuckDBPyConnection:
    root = Path(results_root).resolve()
    if sweep is not None and not (root / sweep).is_dir():
        known = sorted(p.name for p in root.iterdir() if (p / "tables").is_dir()) if root.is_dir() else []
        raise QueryError(f"no results for sweep {sweep!r} under {root} (sweeps with results: {known or 'none'})")
    con = duckdb.connect(":memory:")
    for table, schema in TABLES.items():
        pattern = root / (sweep or "*") / "tables" / table / "*.parquet"
        if any(root.glob(str(pattern.relative_to(root)))):
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet({_sql_str(str(pattern))}, "
                        "union_by_name = true)")
        else:  # no files yet: an empty view with the table's columns, so queries still bind
            con.register(f"_empty_{table}", pa.Table.from_pylist([], schema=schema))
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM _empty_{table}")
    con.execute(f"SET allowed_directories = [{_sql_str(str(root) + '/')}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def query(sql: str, results_root: str | Path = "results", sweep: str | None = None) -> pa.Table:
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryError(str(e)) from None
    if not statements:
        raise QueryError("empty query")
    bad = [s.type.name for s in statements if s.type not in _ALLOWED]
    if bad:
        raise QueryError(f"read-only: only SELECT / EXPLAIN queries are allowed (got {', '.join(bad)})")
    con = connect(results_root, sweep)
    try:
        result = None
        for s in statements:
            result = con.sql(s.query).to_arrow_table()
        return result
    except duckdb.Error as e:
        raise QueryError(str(e).strip()) from None
    finally:
        con.close()
