#!/usr/bin/env python3
"""Do results stay fast at a thousand runs? `rlsweep query` before and after compaction, next to bare DuckDB on one
file of the same rows.

Writes a synthetic sweep's results as the stages write them: per run a runs row and per (run, eval step, benchmark)
one eval_samples and one eval_scores file, each eval job with its DONE.json (default 1,000 runs x 4 eval steps x 5
benchmarks x 64 problems x 4 samples: 20,000 files per eval table, 5.1M samples). Then times a typical aggregate
(final-step accuracy per setting and benchmark, joined with `runs`) three ways, each including what a user waits for
in-process (the catalog listing the files and reading their footers, or bare DuckDB's connection):
  before   `workflow.results.catalog.query` over the stages' small files
  after    the same after `compact()` (whose own time is printed too)
  one file bare DuckDB `read_parquet` over one file per table holding the same rows
Goals: after <= 2x one file, before >= 10x after (issue 27); after <= 1.5x one file at 1,000 runs and <= 2x at 10,000
runs (issue 64; pass --compacted-only at 10,000 runs, where one query over the small files takes minutes), with the
check of every file's digest on (issue 80: workflow/results/digest.py). What the check costs shows twice: the
compacted query with its verdicts cached (as every query after compaction, which leaves the new pack's verdict), and
with the cache off (RLSWEEP_VERDICT_CACHE=off: every pack hashed, what a first query on another machine pays).
The small files are written as the stages write them (writer.write_parquet: sealed); the bench's verdicts go to a
folder of its own.
Phases are announced on stderr, so a long run shows where it is.

    python bench/compaction.py [--runs 1000] [--steps 4] [--benchmarks 5] [--problems 64] [--k 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from workflow.layout import DONE, eval_file, runs_file, stage_dir, table_dir
from workflow.results.catalog import query
from workflow.results.compaction import compact, compaction_line
from workflow.results.membership import Member, record
from workflow.results.schemas import EVAL_SAMPLES, EVAL_SCORES, RUNS
from workflow.results.writer import write_parquet

SWEEP = "bench"
BENCHMARKS = ["math500", "aime24", "amc23", "minerva", "olympiadbench"]
GROUP = "math"
SQL = """
WITH final AS (SELECT * FROM eval_samples QUALIFY step = max(step) OVER (PARTITION BY run_id))
SELECT r.label, f.benchmark, avg(f.correct::INT) AS acc, count(DISTINCT f.run_id) AS runs, count(*) AS samples
FROM final f JOIN runs r ON r.run_id = f.run_id AND r.stage = 'rl'
GROUP BY ALL ORDER BY ALL
"""


def const(value, n: int, type_: pa.DataType) -> pa.Array:
    return pa.array([value] * n, type=type_)


def generate(root: Path, a) -> int:
    """The stages' files of a synthetic sweep; returns how many files."""
    rng = np.random.default_rng(0)
    n = a.problems * a.k
    problem = pa.array([f"p{i // a.k}" for i in range(n)])
    sample = pa.array(np.arange(n) % a.k)
    count = 0
    for table in ("runs", "eval_samples", "eval_scores"):
        table_dir(root, table).mkdir(parents=True)
    for r in range(a.runs):
        run_id, eval_id = f"{r:012x}", f"{r:012x}"[::-1]
        rl = stage_dir(root, "rl", run_id)
        rl.mkdir(parents=True)
        (rl / DONE).write_text("{}")
        write_parquet(pa.Table.from_pylist([{"run_id": run_id, "sweep": SWEEP, "stage": "rl", "status": "completed",
                                             "label": f"setting{r % 10}", "seed": r // 10}], schema=RUNS),
                      table_dir(root, "runs") / f"{runs_file('rl', run_id)}.parquet")
        count += 1
        for step in range(0, a.steps * 50, 50):
            job = stage_dir(root, "eval", eval_id, run_id, step, GROUP)
            job.mkdir(parents=True)
            (job / DONE).write_text("{}")
            for b in BENCHMARKS:
                correct = rng.random(n) < 0.4
                columns = {"run_id": const(run_id, n, pa.string()), "eval_id": const(eval_id, n, pa.string()),
                           "sweep": const(SWEEP, n, pa.string()), "step": const(step, n, pa.int64()),
                           "benchmark": const(b, n, pa.string()), "grader": pa.nulls(n, pa.string()),
                           "problem_id": problem, "sample_idx": sample,
                           "correct": pa.array(correct), "response_len": pa.array(rng.integers(10, 4000, n)),
                           "extracted": const("42", n, pa.string()), "truncated": const(False, n, pa.bool_()),
                           "response": const("Let me think. The answer is \\boxed{42}.", n, pa.string()),
                           "timed_out": const(False, n, pa.bool_()), "shuffle_seed": pa.nulls(n, pa.int64())}
                name = eval_file(run_id, eval_id, step, b)
                write_parquet(pa.table(columns, schema=EVAL_SAMPLES), table_dir(root, "eval_samples")
                              / f"{name}.parquet")
                scores = {**{f.name: None for f in EVAL_SCORES}, "run_id": run_id, "eval_id": eval_id,
                          "sweep": SWEEP, "step": step, "benchmark": b, "k": 1, "avg_at_k": float(correct.mean())}
                write_parquet(pa.Table.from_pylist([scores], schema=EVAL_SCORES),
                              table_dir(root, "eval_scores") / f"{name}.parquet")
                count += 2
        if r % 100 == 99:
            print(f"  generated {r + 1} runs ({count:,} files)", file=sys.stderr)
    record(root, SWEEP, [Member(stage, f"{r:012x}"[::step]) for r in range(a.runs)  # as Snakemake records the sweep
                         for stage, step in (("rl", 1), ("eval", -1))])
    return count


def one_file_per_table(root: Path, out: Path) -> None:
    """The same rows, one file per table (the reference a compacted layout is measured against)."""
    out.mkdir()
    con = duckdb.connect()
    # At 10,000 runs this COPY spills gigabytes; by default DuckDB spills into the working directory (the checkout).
    con.execute(f"SET temp_directory = '{out / '.spill'}'")
    for table in ("runs", "eval_samples"):
        con.execute(f"COPY (SELECT * FROM read_parquet('{table_dir(root, table)}/*.parquet')) "
                    f"TO '{out / table}.parquet' (FORMAT parquet, COMPRESSION zstd)")
    con.close()


def bare(one: Path, sql: str) -> pa.Table:
    con = duckdb.connect(":memory:")
    for table in ("runs", "eval_samples"):
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{one / table}.parquet')")
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def median_of(repeat: int, fn, *args) -> tuple[float, list[float], pa.Table]:
    times, out = [], None
    for _ in range(repeat):
        t, out = timed(fn, *args)
        times.append(t)
    return statistics.median(times), times, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--steps", type=int, default=4, help="eval steps per run")
    p.add_argument("--benchmarks", type=int, default=5, choices=range(1, len(BENCHMARKS) + 1))
    p.add_argument("--problems", type=int, default=64)
    p.add_argument("--k", type=int, default=4, help="samples per problem")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--compacted-only", action="store_true",
                   help="skip timing the query over the stages' small files (minutes each at 10,000 runs)")
    a = p.parse_args()
    del BENCHMARKS[a.benchmarks:]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "results"
        verdicts = Path(tmp) / "verdicts"
        os.environ["RLSWEEP_VERDICT_CACHE"] = str(verdicts)
        say(f"generating {a.runs:,} runs' files ...")
        t_gen, n_files = timed(generate, root, a)
        one = Path(tmp) / "one"
        n_bytes = sum(p.stat().st_size for p in (root / "_store" / "tables").rglob("*.parquet"))
        say(f"generated {n_files:,} files in {t_gen:.0f} s; writing the one-file reference ...")
        one_file_per_table(root, one)
        expected = bare(one, SQL)  # (and warms the page cache)
        t_before, before_times = float("nan"), []
        if not a.compacted_only:
            query(SQL, root, SWEEP)
            t_before, before_times, got = median_of(a.repeat, query, SQL, root, SWEEP)
            if got.to_pylist() != expected.to_pylist():
                sys.exit("before compaction: rlsweep and bare DuckDB disagree on the result")
        say("compacting ...")
        t_compact, done = timed(compact, root)
        say(f"compacted in {t_compact:.0f} s; timing the compacted query against the reference ...")
        query(SQL, root, SWEEP)
        one_times, after_times, unverified_times = [], [], []
        for _ in range(a.repeat):  # interleaved with the reference, so that a busy moment hits both
            t, _ = timed(bare, one, SQL)
            one_times.append(t)
            t, got = timed(query, SQL, root, SWEEP)
            after_times.append(t)
            if got.to_pylist() != expected.to_pylist():
                sys.exit("after compaction: the result changed")
            os.environ["RLSWEEP_VERDICT_CACHE"] = "off"  # every pack hashed at every query
            t, _ = timed(query, SQL, root, SWEEP)
            unverified_times.append(t)
            os.environ["RLSWEEP_VERDICT_CACHE"] = str(verdicts)
        t_one, t_after = statistics.median(one_times), statistics.median(after_times)
        t_unverified = statistics.median(unverified_times)
        packs = sum(p.stat().st_size for p in (root / "_store" / "tables").rglob("packed-*.parquet"))
        mirrors = sum(p.stat().st_size for p in (root / "_store" / "mirrors").rglob("*.parquet"))
        small = n_bytes
    samples = a.runs * a.steps * a.benchmarks * a.problems * a.k

    def row(label: str, t: float, times: list[float]) -> str:
        return f"{label:<34}{t:8.3f} s  (median of {len(times)}: {', '.join(f'{x:.3f}' for x in times)})"

    print(f"sweep: {a.runs:,} runs x {a.steps} eval steps x {a.benchmarks} benchmarks: {n_files:,} files, "
          f"{samples:,} samples (generated in {t_gen:.0f} s)")
    print(row("bare DuckDB, one file per table:", t_one, one_times))
    if before_times:
        print(row("rlsweep query, stages' files:", t_before, before_times))
    print(f"{'compaction:':<34}{t_compact:8.3f} s  ({compaction_line(done)})")
    print(row("rlsweep query, compacted:", t_after, after_times))
    print(row("  the same, no verdicts cached:", t_unverified, unverified_times))
    print(f"compacted / one file:             {t_after / t_one:8.2f} x  (goal <= 1.5 at 1,000 runs, <= 2 at 10,000)")
    print(f"  no verdicts cached / one file:  {t_unverified / t_one:8.2f} x  (each pack hashed: the check's cost)")
    print(f"disk: the small files {small / 1e6:.1f} MB; after compaction, packs {packs / 1e6:.1f} MB and their mirrors "
          f"{mirrors / 1e6:.1f} MB")
    if before_times:
        print(f"before / after compaction:        {t_before / t_after:8.1f} x  (goal >= 10)")


if __name__ == "__main__":
    main()
