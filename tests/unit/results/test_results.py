"""Tables: atomic writes survive a crash, schemas reject typos, the query CLI is read-only and filters by sweep."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers import REPO, cli
from workflow.results.catalog import QueryError, query
from workflow.layout import eval_file, runs_file, table_dir
from workflow.results.membership import Member, record
from workflow.results.writer import to_arrow, write_rows

CRASHING_WRITER = r"""
import os, sys
from workflow.results import writer

def write_then_die(where):
    # the real bytes written, then only half of them kept, and death the way a killed job dies (no cleanup handlers)
    size = os.path.getsize(where)
    with open(where, "r+b") as f:
        f.truncate(size // 2)
    os._exit(9)
writer.digest.seal = write_then_die
rows = [dict(run_id="0000000000a0", sweep="s", stage="rl", step=i, loss=float(i)) for i in range(100_000)]
writer.write_rows(sys.argv[1], "train_steps", "rl_0000000000a0_000001-100000", rows)
"""


def test_crash_in_the_middle_of_a_parquet_write_leaves_no_visible_partial_file(tmp_path):
    # an earlier complete version of the same file must survive untouched
    write_rows(tmp_path, "train_steps", "rl_0000000000a0_000001-100000", [dict(run_id="0000000000a0", sweep="s", stage="rl", step=1)])
    res = subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(tmp_path)], cwd=REPO, capture_output=True)
    assert res.returncode == 9
    files = sorted(p.name for p in table_dir(tmp_path, "train_steps").iterdir())
    visible = [f for f in files if not f.startswith(".")]
    assert visible == ["rl_0000000000a0_000001-100000.parquet"]
    assert len(files) == 2  # the half-written temporary is there (hidden): the crash really happened mid-write
    assert pq.read_table(table_dir(tmp_path, "train_steps") / "rl_0000000000a0_000001-100000.parquet").num_rows == 1
    assert query("SELECT count(*) AS n FROM train_steps", tmp_path).column("n").to_pylist() == [1]


def test_unknown_columns_are_an_error_except_runs_hyperparameters():
    with pytest.raises(ValueError, match="unknown column"):
        to_arrow("train_steps", [{"run_id": "a", "stepp": 1}])
    t = to_arrow("runs", [{"run_id": "a", "rl_lr": 1e-4}], allow_extra=True)
    assert "rl_lr" in t.column_names and "status" in t.column_names


@pytest.fixture
def two_sweeps(tmp_path) -> Path:
    for sweep, runs in (("a", ["0000000000a1", "0000000000a2"]), ("b", ["0000000000a3"])):
        for r in runs:
            write_rows(tmp_path, "eval_scores", eval_file(r, "e" + r[1:], 3, "x"),
                       [dict(run_id=r, eval_id="e" + r[1:], sweep=sweep, k=1, avg_at_k=0.5, step=3)])
        record(tmp_path, sweep, [Member("eval", "e" + r[1:]) for r in runs])  # as Snakemake records each sweep
    return tmp_path


def test_query_spans_sweeps_and_filters_by_sweep(two_sweeps):
    assert query("SELECT count(*) AS n FROM eval_scores", two_sweeps).column("n").to_pylist() == [3]
    assert query("SELECT count(*) AS n FROM eval_scores", two_sweeps, "b").column("n").to_pylist() == [1]
    # tables with no files yet are still queryable (empty, with their columns)
    assert query("SELECT count(*) AS n, max(backward_passes) AS b FROM train_steps", two_sweeps).to_pylist() == \
        [{"n": 0, "b": None}]
    with pytest.raises(QueryError, match="no results for sweep 'c'"):
        query("SELECT 1", two_sweeps, "c")


@pytest.mark.parametrize("sql", [
    "COPY (SELECT 1) TO 'out.csv'",
    "CREATE TABLE t AS SELECT 1",
    "ATTACH 'x.db'",
    "SELECT 1; DROP VIEW runs",
    "SELECT * FROM read_csv('/etc/passwd')",
])
def test_query_is_read_only(two_sweeps, sql):
    with pytest.raises(QueryError):
        query(sql, two_sweeps)


def test_query_cli_formats_and_errors(two_sweeps):
    base = ("--results", str(two_sweeps), "query", "SELECT run_id, avg_at_k FROM eval_scores ORDER BY run_id")
    csv = cli(*base, "--format", "csv")
    assert csv.returncode == 0 and csv.stdout.splitlines() == ['"run_id","avg_at_k"', '"0000000000a1",0.5', '"0000000000a2",0.5',
                                                                '"0000000000a3",0.5']
    js = cli(*base, "--format", "json", "--sweep", "a")
    assert [r["run_id"] for r in json.loads(js.stdout)] == ["0000000000a1", "0000000000a2"]
    table = cli(*base)
    assert table.returncode == 0 and "0000000000a3" in table.stdout and "3 rows" in table.stderr
    bad = cli("--results", str(two_sweeps), "query", "SELECT nope FROM eval_scores")
    assert bad.returncode == 2 and "error:" in bad.stderr and "nope" in bad.stderr


def test_summary_reports_set_averages_only_when_a_set_is_complete(tmp_path):
    from workflow.benchmarks.catalog import MATH_SET
    from workflow.results.summary import write_summary
    write_rows(tmp_path, "runs", "rl_0000000000a1", [dict(run_id="0000000000a1", sweep="s", stage="rl", method="grpo", label="x")])
    rows = [dict(run_id="0000000000a1", sweep="s", step=5, benchmark=b, k=1, avg_at_k=0.1 * (i + 1), pass_at_k=0.5,
                 n_samples=1, mean_len=3.0) for i, b in enumerate(MATH_SET)]
    rows.append(dict(run_id="0000000000a1", sweep="s", step=5, benchmark="arc_c", k=1, avg_at_k=0.9, pass_at_k=0.9,
                     n_samples=1, mean_len=3.0))
    write_rows(tmp_path, "eval_scores", eval_file("0000000000a1", "0000000000e1", 5, "all"), [{**r, "eval_id": "0000000000e1"} for r in rows])
    record(tmp_path, "s", [Member("rl", "0000000000a1"), Member("eval", "0000000000e1")])
    text = write_summary(tmp_path, "s", tmp_path / "summary.md").read_text()
    expected = sum(0.1 * (i + 1) for i in range(len(MATH_SET))) / len(MATH_SET)
    assert f"| grpo | x | {expected:.3f} | — |" in text  # OOD set incomplete (only arc_c): no average


def test_summary_keeps_one_run_evaluated_under_two_eval_settings_apart(tmp_path):
    """A grid over an eval setting evaluates one RL run twice (two eval ids, one run id): two settings in the
    summary, each with its own numbers (not the better of the two for both)."""
    from workflow.results.summary import summarize
    write_rows(tmp_path, "runs", "rl_0000000000a1", [dict(run_id="0000000000a1", sweep="s", stage="rl", method="grpo",
                                                     label="eval.temperature=0.6")])
    for eval_id, temperature, acc in (("0000000000e1", "0.6", 0.2), ("0000000000e2", "1.0", 0.6)):
        write_rows(tmp_path, "runs", runs_file("eval", eval_id, 5, "math"), [dict(
            run_id=eval_id, sweep="s", stage="eval", parent_id="0000000000a1", method="eval",
            label=f"eval.temperature={temperature}")])
        write_rows(tmp_path, "eval_scores", eval_file("0000000000a1", eval_id, 5, "arithmetic"), [dict(
            run_id="0000000000a1", eval_id=eval_id, sweep="s", step=5, benchmark="arithmetic", k=1, avg_at_k=acc,
            pass_at_k=acc, n_samples=1, mean_len=3.0)])
    record(tmp_path, "s", [Member("rl", "0000000000a1"), Member("eval", "0000000000e1"), Member("eval", "0000000000e2")])
    rows = summarize(tmp_path, "s").select(["label", "method", "seeds", "avg_at_k"]).to_pylist()
    assert rows == [{"label": "eval.temperature=0.6", "method": "grpo", "seeds": 1, "avg_at_k": 0.2},
                    {"label": "eval.temperature=1.0", "method": "grpo", "seeds": 1, "avg_at_k": 0.6}]


def test_results_option_works_before_and_after_the_subcommand(two_sweeps):
    sql = "SELECT count(*) AS n FROM eval_scores"
    before = cli("--results", str(two_sweeps), "query", sql, "--format", "json")
    after = cli("query", sql, "--format", "json", "--results", str(two_sweeps))
    assert json.loads(before.stdout) == json.loads(after.stdout) == [{"n": 3}]
