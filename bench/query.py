#!/usr/bin/env python3
"""Does the read-only catalog cost query speed? `rlsweep query` next to bare DuckDB on the same files.

Generates N rows of `eval_samples` (default 10,000,000, in the table's real schema, written by the project's
writer into a handful of Parquet files in a temporary results directory), then times the same aggregate SQL
through bare DuckDB (`read_parquet` over the files' glob, default options) and through
`workflow.results.catalog.query` (which checks every file's footer, then reads through its read-only file system
with DuckDB's local file system disabled). Both times include opening the connection. Prints both and the ratio
(goal <= 2x). Then the same as whole processes, what a user waits for: `rlsweep query --format csv SQL` next to
`python -c` with bare DuckDB (interpreter start and imports included on both sides).

    python bench/query.py [--rows 10000000] [--files 8] [--repeat 5] [--sql "SELECT ..."]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from workflow.layout import eval_file, table_dir
from workflow.results.membership import Member, record
from workflow.results.catalog import query
from workflow.results.schemas import EVAL_SAMPLES
from workflow.results.writer import write_parquet

SQL = "SELECT run_id, benchmark, avg(correct::INT) AS acc, count(*) AS n FROM eval_samples GROUP BY ALL ORDER BY ALL"
BENCHMARKS = ["math500", "aime24", "aime25", "amc23", "minerva", "olympiad", "gpqa", "mmlu_pro"]


def repeat(value: str, n: int) -> pa.Array:
    return pa.array([value]).take(np.zeros(n, dtype=np.int64))


def samples(n: int, run_id: str, rng: np.random.Generator) -> pa.Table:
    """One eval job's rows, vectorised (a Python loop over 10M dicts would time the generator, not the query)."""
    idx = np.arange(n)
    extracted = pc.cast(pa.array(rng.integers(0, 1000, n)), pa.string())
    columns = {
        "run_id": repeat(run_id, n), "eval_id": repeat(run_id[::-1], n), "sweep": repeat("bench", n),
        "step": pa.array(np.full(n, 100)),
        "benchmark": pa.array(BENCHMARKS).take(rng.integers(0, len(BENCHMARKS), n)), "grader": pa.nulls(n, pa.string()),
        "problem_id": pc.cast(pa.array(idx // 16), pa.string()), "sample_idx": pa.array(idx % 16),
        "correct": pa.array(rng.random(n) < 0.4), "response_len": pa.array(rng.integers(10, 4000, n)),
        "extracted": extracted, "truncated": pa.array(rng.random(n) < 0.05),
        "response": pc.binary_join_element_wise("Let me think step by step. The answer is \\boxed{", extracted, "}.",
                                                ""),
        "timed_out": pa.array(np.zeros(n, dtype=bool)), "shuffle_seed": pa.nulls(n, pa.int64()),
    }
    return pa.table(columns, schema=EVAL_SAMPLES)


def generate(root: Path, rows: int, files: int) -> list[Path]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(files):
        n = rows // files + (i < rows % files)
        run_id = f"{i:012x}"
        name = eval_file(run_id, "e" * 12, 100, "all")
        out.append(write_parquet(samples(n, run_id, rng), table_dir(root, "eval_samples") / f"{name}.parquet"))
    record(root, "bench", [Member("eval", "e" * 12)])  # the sweep's plan, as Snakemake records it
    return out


def bare(root: Path, sql: str) -> pa.Table:
    con = duckdb.connect(":memory:")
    pattern = str(table_dir(root, "eval_samples") / "*.parquet")
    con.execute(f"CREATE VIEW eval_samples AS SELECT * FROM read_parquet('{pattern}')")
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def bare_process(root: Path, sql: str) -> None:
    pattern = str(table_dir(root, "eval_samples") / "*.parquet")
    code = ("import duckdb, sys; con = duckdb.connect(); "
            f"con.execute(\"CREATE VIEW eval_samples AS SELECT * FROM read_parquet('{pattern}')\"); "
            f"con.sql(sys.argv[1]).write_csv('/dev/stdout')")
    subprocess.run([sys.executable, "-c", code, sql], check=True, stdout=subprocess.DEVNULL)


def rlsweep_process(root: Path, sql: str) -> None:
    subprocess.run([sys.executable, "-m", "workflow.cli", "--results", str(root), "query", "--format", "csv", sql],
                   check=True, stdout=subprocess.DEVNULL)


def timed(fn, *args) -> tuple[float, pa.Table]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--files", type=int, default=8)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--sql", default=SQL)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t_gen, files = timed(generate, root, a.rows, a.files)
        size = sum(f.stat().st_size for f in files)
        bare(root, a.sql), query(a.sql, root, "bench")  # warm the page cache for both
        t_bare, t_ours = [], []
        for _ in range(a.repeat):  # interleaved, so machine noise hits both alike
            t, expected = timed(bare, root, a.sql)
            t_bare.append(t)
            t, got = timed(query, a.sql, root, "bench")
            t_ours.append(t)
            if got.to_pylist() != expected.to_pylist():
                sys.exit("the two paths disagree on the result")
        p_bare = [timed(bare_process, root, a.sql)[0] for _ in range(a.repeat)]
        p_ours = [timed(rlsweep_process, root, a.sql)[0] for _ in range(a.repeat)]
    mb, mo = statistics.median(t_bare), statistics.median(t_ours)
    print(f"rows / files / size:         {a.rows:,} / {a.files} / {size / 1e6:.0f} MB (generated in {t_gen:.1f} s)")
    print(f"query:                       {a.sql}")
    print(f"bare DuckDB read_parquet:    {mb:7.3f} s  (median of {a.repeat}: {', '.join(f'{x:.3f}' for x in t_bare)})")
    print(f"rlsweep catalog.query:       {mo:7.3f} s  (median of {a.repeat}: {', '.join(f'{x:.3f}' for x in t_ours)})")
    print(f"ratio:                       {mo / mb:7.2f} x  (goal <= 2)")
    pb, po = statistics.median(p_bare), statistics.median(p_ours)
    print(f"process: python -c duckdb:   {pb:7.3f} s  (median of {a.repeat}: {', '.join(f'{x:.3f}' for x in p_bare)})")
    print(f"process: rlsweep query:      {po:7.3f} s  (median of {a.repeat}: {', '.join(f'{x:.3f}' for x in p_ours)})")
    print(f"ratio:                       {po / pb:7.2f} x  (goal <= 2)")


if __name__ == "__main__":
    main()
