"""`rlsweep query` cannot change results: statements that nest a write (EXPLAIN ANALYZE COPY, a CTE that copies, a
second statement) are refused below SQL and leave every file as it was; reads outside the tables are refused too;
a missing results directory or sweep is an error, not an empty table; and reading through the catalog's own file
system returns the files' rows, row groups read by several threads at once included."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from helpers import cli
from workflow.layout import eval_file, stage_dir, table_dir
from workflow.results.catalog import QueryError, query
from workflow.results.writer import to_arrow, write_rows


def snapshot(root):
    """Every path under `root` with its modification time and size: a write anywhere changes it."""
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*")}


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results"
    write_rows(root, "runs", "rl_0000000000a1", [dict(run_id="0000000000a1", sweep="s", stage="rl", status="completed", rl_lr=1e-4)])
    write_rows(root, "train_steps", "rl_0000000000a1_000001-000002",
               [dict(run_id="0000000000a1", sweep="s", stage="rl", step=i, loss=1.0 / i) for i in (1, 2)])
    write_rows(root, "eval_scores", "0000000000a1_0000000000e1_step000002_arithmetic",
               [dict(run_id="0000000000a1", eval_id="0000000000e1", sweep="s", step=2, benchmark="arithmetic", k=1, avg_at_k=0.5)])
    stage_dir(root, "rl", "0000000000a1").mkdir(parents=True)
    (stage_dir(root, "rl", "0000000000a1") / "DONE.json").write_text('{"step": 2}')
    return root


def nested_writes(root) -> dict[str, str]:
    runs = table_dir(root, "runs")
    return {
        "explain analyze copy": f"EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO '{runs}/x.parquet'",
        "explain analyze copy over a result file":
            f"EXPLAIN ANALYZE COPY (SELECT 'evil' AS run_id) TO '{runs}/rl_r1.parquet'",
        "a CTE that copies": f"WITH w AS (COPY (SELECT 1 AS a) TO '{runs}/cte.parquet') SELECT 1 AS one",
        "a second statement": f"SELECT 1; EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO '{runs}/second.parquet'",
        "through the catalog's file system":
            f"EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO 'rlsweep-ro://{runs}/ro.parquet'",
        "a relative path": "EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO 'relative.csv'",
        "a partitioned copy into the store": f"EXPLAIN ANALYZE COPY (SELECT * FROM runs) TO '{root}/_store' "
                                             "(FORMAT parquet, PARTITION_BY (stage), OVERWRITE_OR_IGNORE)",
    }


@pytest.mark.parametrize("case", list(nested_writes(Path("/r"))))
def test_a_write_nested_in_a_query_is_refused_and_changes_nothing(results, tmp_path, case):
    sql = nested_writes(results)[case]
    before = snapshot(tmp_path)  # the results and the working directory (a relative path lands there)
    res = cli("--results", str(results), "query", sql, cwd=tmp_path)
    assert snapshot(tmp_path) == before
    assert res.returncode == 2 and res.stderr.startswith("error: read-only"), res.stderr
    assert "Traceback" not in res.stderr
    assert query("SELECT run_id FROM runs", results).to_pylist() == [{"run_id": "0000000000a1"}]


@pytest.mark.parametrize("sql", [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('{root}/_store/rl/0000000000a1/DONE.json')",  # inside the results directory, but not a table
    "SELECT * FROM glob('{root}/*')",
    "EXPLAIN ANALYZE ATTACH '{root}/x.db'",
    "EXPLAIN ANALYZE SET disabled_filesystems = ''",
    "EXPLAIN ANALYZE SET enable_external_access = true",
])
def test_reads_outside_the_tables_and_settings_are_refused(results, sql):
    before = snapshot(results)
    with pytest.raises(QueryError):
        query(sql.format(root=results), results)
    assert snapshot(results) == before


def test_a_missing_results_directory_or_sweep_is_an_error_not_an_empty_table(results, tmp_path):
    for where, sweep, message in [(tmp_path / "nowhere", None, "no results directory"),
                                  (results, "other", "no results for sweep 'other'"),
                                  (tmp_path / "empty", None, "no result tables under")]:
        if where.name == "empty":
            (where / "_store" / "rl").mkdir(parents=True)  # a store where nothing that writes tables has started
        res = cli("--results", str(where), "query", "SELECT count(*) AS n FROM runs",
                      *(["--sweep", sweep] if sweep else []), cwd=tmp_path)
        assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr, res.stderr
        with pytest.raises(QueryError, match=message):
            query("SELECT count(*) AS n FROM runs", where, sweep)


def test_columns_no_file_has_yet_read_as_null(results):
    """Older files lack newer columns; a table with no files at all still has its columns."""
    out = query("SELECT count(*) AS n, max(timed_out) AS t, max(response) AS r FROM eval_samples", results)
    assert out.to_pylist() == [{"n": 0, "t": None, "r": None}]
    assert query("SELECT max(gxpo_gcorr_norm) AS g, max(rl_lr) AS lr FROM train_steps, runs",
                 results).to_pylist() == [{"g": None, "lr": 1e-4}]


def test_many_row_groups_read_by_several_threads_give_the_files_rows(tmp_path):
    """DuckDB's threads share one handle per file; with one shared position a thread would read another's bytes."""
    n = 200_000
    table = to_arrow("eval_samples", [dict(run_id=f"r{i % 7}", eval_id="e", sweep="s", step=1, benchmark="b",
                                           problem_id=str(i), sample_idx=i % 4, correct=i % 3 == 0,
                                           response_len=i % 1000, response="x" * (i % 50)) for i in range(n)])
    path = table_dir(tmp_path, "eval_samples") / f"{eval_file('a' * 12, 'e' * 12, 1, 'b')}.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path, row_group_size=5_000)  # 40 row groups
    got = query("SELECT run_id, count(*) AS n, sum(response_len) AS l, sum(length(response)) AS chars "
                "FROM eval_samples GROUP BY ALL ORDER BY run_id", tmp_path)
    with_len = table.append_column("chars", pc.utf8_length(table["response"]))
    expected = with_len.group_by("run_id").aggregate([("run_id", "count"), ("response_len", "sum"), ("chars", "sum")])
    assert got.to_pylist() == sorted(({"run_id": r["run_id"], "n": r["run_id_count"], "l": r["response_len_sum"],
                                       "chars": r["chars_sum"]} for r in expected.to_pylist()),
                                     key=lambda r: r["run_id"])


def test_a_query_binds_the_views_it_reads_and_a_listing_still_sees_every_table(results):
    """A connection makes only the views its statements name (binding a view opens files), yet nothing a user
    can see changes: the rows are the same, and a query that lists the catalog's tables sees all of them."""
    from duckdb import extract_statements

    from workflow.results.catalog import tables_read
    from workflow.results.schemas import TABLES

    def read(sql):
        return tables_read(extract_statements(sql))

    assert read("WITH f AS (SELECT * FROM eval_scores) SELECT * FROM f JOIN runs r ON r.run_id = f.run_id") == \
        ("runs", "eval_scores")
    assert read("SELECT count(*) FROM train_steps; SELECT * FROM eval_grades") == ("train_steps", "eval_grades")
    for everything in ("SELECT 1", "SELECT * FROM information_schema.tables", "SELECT * FROM duckdb_views()",
                       "SELECT * FROM runs JOIN eval_scores USING (run_id)"):  # (DuckDB cannot list a USING join's)
        assert read(everything) == TABLES, everything
    assert query("SELECT sum(step) AS s FROM train_steps", results).column("s").to_pylist() == [3]
    listed = query("SELECT table_name FROM information_schema.tables", results).column("table_name").to_pylist()
    assert {*TABLES, "membership"} <= set(listed)
