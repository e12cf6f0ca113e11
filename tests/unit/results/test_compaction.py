"""Compaction: a sweep's finished stages' table files merged into packs. Queries give the same rows before and after,
at every moment of a compaction and after a crash at any point of it; a stage that runs again after compaction has
its new rows replace its packed ones; what reads one stage's rows directly (a copied step-0 evaluation, an Optuna
trial's runs row) finds them in a pack; `rlsweep doctor` understands packs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from helpers import REPO
from workflow.benchmarks.catalog import REGISTRY
from workflow.eval.harness import copy_evaluation
from workflow.layout import (DONE, eval_file, is_pack, pack_mirror, runs_file, stage_dir, store_dir, table_dir,
                             train_steps_file)
from workflow.results import compaction, digest
from workflow.results.catalog import Catalog, query
from workflow.results.compaction import CompactionBusy, compact
from workflow.results.doctor import examine, quarantine
from workflow.results.rows import rows_written_as, stage_rows
from workflow.results.membership import Member, record
from workflow.results.schemas import schema as table_schema
from workflow.results.writer import write_rows
from workflow.runlock import LOCK_NAME

SWEEP = "s"
GROUP = REGISTRY["math500"].group
COUNTS = ("SELECT (SELECT count(*) FROM runs) AS runs, (SELECT count(*) FROM train_steps) AS steps, "
          "(SELECT count(*) FROM eval_scores) AS scores, (SELECT count(*) FROM eval_samples) AS samples, "
          "(SELECT sum(step) FROM train_steps) AS step_sum, (SELECT string_agg(status, ',' ORDER BY run_id) "
          "FROM runs WHERE stage = 'rl') AS statuses, (SELECT sum(rl_lr) FROM runs) AS lr_sum")


def write_run(root: Path, i: int, finished: bool = True, status: str = "completed", steps: tuple = (1, 3)) -> None:
    """What one RL stage and its evaluations write: a runs row (with a hyperparameter column), train_steps in
    two-step checkpoint intervals, and per eval step a score and two samples; DONE.json when `finished`."""
    rid = f"{0xd0 + i:012x}"
    rl = stage_dir(root, "rl", rid)
    rl.mkdir(parents=True, exist_ok=True)
    write_rows(root, "runs", runs_file("rl", rid),
               [{"run_id": rid, "sweep": SWEEP, "stage": "rl", "status": status, "method": "grpo", "label": "grpo",
                 "rl_lr": i if i % 2 else i / 4}])  # (exact sums in any order)
    for first in steps:
        write_rows(root, "train_steps", train_steps_file("rl", rid, first, first + 1),
                   [{"run_id": rid, "sweep": SWEEP, "stage": "rl", "step": s} for s in (first, first + 1)])
    for step in (0, 4):
        ev = stage_dir(root, "eval", f"{0xe0 + i:012x}", rid, step, GROUP)
        ev.mkdir(parents=True, exist_ok=True)
        common = {"run_id": rid, "eval_id": f"{0xe0 + i:012x}", "sweep": SWEEP, "step": step, "benchmark": "math500"}
        write_rows(root, "eval_scores", eval_file(rid, f"{0xe0 + i:012x}", step, "math500"),
                   [{**common, "k": 1, "avg_at_k": 0.5, "pass_at_k": 0.5, "n_samples": 1, "mean_len": 10.0}])
        write_rows(root, "eval_samples", eval_file(rid, f"{0xe0 + i:012x}", step, "math500"),
                   [{**common, "problem_id": "p", "sample_idx": j, "correct": bool(j)} for j in range(2)])
        write_rows(root, "runs", runs_file("eval", f"{0xe0 + i:012x}", step, GROUP),
                   [{"run_id": f"{0xe0 + i:012x}", "sweep": SWEEP, "stage": "eval", "parent_id": rid, "status": status,
                     "eval_step": step, "eval_group": GROUP}])
        if finished:
            (ev / DONE).write_text("{}")
    if finished:
        (rl / DONE).write_text("{}")


def counts(root: Path) -> dict:
    return query(COUNTS, root, SWEEP).to_pylist()[0]


def files(root: Path, table: str) -> list[Path]:
    return sorted(table_dir(root, table).glob("*.parquet"))


@pytest.fixture
def sweep(tmp_path) -> Path:
    for i in range(3):
        write_run(tmp_path, i)
    write_run(tmp_path, 9, finished=False, status="running")  # a stage still at work: its files stay as they are
    record(tmp_path, SWEEP, [Member(stage, f"{base + i:012x}") for i in (0, 1, 2, 9)  # as Snakemake records the sweep
                             for stage, base in (("rl", 0xd0), ("eval", 0xe0))])
    return tmp_path


def test_compaction_packs_finished_stages_and_every_query_gives_the_same_rows(sweep):
    before = counts(sweep)
    assert before["steps"] == 4 * 4 and before["runs"] == 4 * 3
    done = {c.table: c for c in compact(sweep)}
    assert counts(sweep) == before
    assert done["train_steps"].packed == 6 and done["train_steps"].skipped == 2 and done["train_steps"].rows == 12
    for table in ("runs", "train_steps", "eval_scores", "eval_samples"):
        names = [p.stem for p in files(sweep, table)]
        assert sum(map(is_pack, names)) == 1, names
        assert all(is_pack(n) or "9" in n for n in names), names  # only the unfinished run's files remain
    # a second round with nothing new to pack changes nothing
    again = compact(sweep)
    assert sum(c.packed for c in again) == 0 and counts(sweep) == before


def test_many_files_are_packed_in_parts_with_every_row_once_and_nothing_left_beside(sweep, monkeypatch):
    """More small files than one DuckDB statement reads (BATCH) go through temporary parts, whose columns differ (an
    eval stage's runs rows lack the RL hyperparameters): the same rows, each with its source, and no part left."""
    monkeypatch.setattr(compaction, "BATCH", 2)
    before = counts(sweep)
    sources = query("SELECT run_id, stage, count(*) AS n FROM runs GROUP BY ALL ORDER BY ALL", sweep, SWEEP)
    done = {c.table: c for c in compact(sweep)}
    assert done["train_steps"].packed == 6 and done["runs"].packed == 9  # several parts each
    assert counts(sweep) == before
    assert query("SELECT run_id, stage, count(*) AS n FROM runs GROUP BY ALL ORDER BY ALL", sweep, SWEEP) == sources
    for table in ("runs", "train_steps", "eval_scores", "eval_samples"):
        assert not [p.name for p in table_dir(sweep, table).iterdir() if p.name.startswith(".")]
    write_run(sweep, 3)  # and a crash while the parts are written leaves neither a pack nor a part
    record(sweep, SWEEP, [Member("rl", f"{0xd3:012x}"), Member("eval", f"{0xe3:012x}")])
    real = compaction.duckdb.connect

    class FailsOnTheSecondCopy:  # compaction's connection: its second COPY is a part's
        def __init__(self, *args):
            self.con, self.copies = real(*args), 0

        def execute(self, sql):
            self.copies += sql.startswith("COPY")
            if self.copies == 2:
                raise OSError("disk full")
            return self.con.execute(sql)

        def close(self):
            self.con.close()

    before, listed = counts(sweep), {t: files(sweep, t) for t in ("runs", "train_steps", "eval_scores", "eval_samples")}
    with monkeypatch.context() as m, pytest.raises(OSError, match="disk full"):
        m.setattr(compaction, "duckdb", SimpleNamespace(connect=FailsOnTheSecondCopy))
        compact(sweep)
    assert counts(sweep) == before and {t: files(sweep, t) for t in listed} == listed
    assert not [p for t in listed for p in table_dir(sweep, t).iterdir() if p.name.startswith(".")]


def test_compaction_leaves_a_training_stages_files_alone(sweep):
    """What lets TrainLog.discard_after and a resuming segment list a training stage's small files by name: a stage
    still training is never packed. Here a run between its segments (DONE_2.json, no DONE.json) and a finished run
    whose stage job still holds its RUNNING.lock (a requeued job, a forced rerun) keep every file as it is."""
    write_run(sweep, 5, finished=False, status="paused")
    (stage_dir(sweep, "rl", f"{0xd5:012x}") / "DONE_2.json").write_text("{}")
    write_run(sweep, 6)
    (stage_dir(sweep, "rl", f"{0xd6:012x}") / LOCK_NAME).write_text("")
    own = {table: [p for p in files(sweep, table) if f"{0xd5:012x}" in p.name or f"{0xd6:012x}" in p.name]
           for table in ("runs", "train_steps")}
    assert len(own["train_steps"]) == 4
    compact(sweep)
    for table, paths in own.items():
        assert all(p.is_file() for p in paths), table
        packed = [stem for p in files(sweep, table) if is_pack(p.stem)
                  for stem in pq.read_table(p).column("packed_from").to_pylist()]
        assert not [stem for stem in packed if f"{0xd5:012x}" in stem or f"{0xd6:012x}" in stem], table


@pytest.mark.parametrize("deletes_before_crash", [0, 1, 4])
def test_a_crash_at_any_point_of_compaction_loses_and_duplicates_nothing(sweep, monkeypatch, deletes_before_crash):
    before = counts(sweep)
    real, calls = compaction._remove_if, []

    def dies_after_some_deletes(path, was):
        if len(calls) == deletes_before_crash:
            raise KeyboardInterrupt("killed")
        calls.append(path)
        return real(path, was)

    monkeypatch.setattr(compaction, "_remove_if", dies_after_some_deletes)
    with pytest.raises(KeyboardInterrupt):
        compact(sweep)
    assert counts(sweep) == before  # a pack in place and (some of) the files it holds still there: each row once
    monkeypatch.setattr(compaction, "_remove_if", real)
    compact(sweep)  # the next round finishes the deletes
    assert counts(sweep) == before
    assert len(files(sweep, "runs")) == 1 + 3  # one pack, run9's own files (its RL stage's, its evaluations')


def test_a_crash_while_the_pack_is_written_leaves_the_files_as_they_were(sweep, monkeypatch):
    before, listed = counts(sweep), {t: files(sweep, t) for t in ("runs", "train_steps")}

    def fails(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(compaction, "_write_pack", fails)
    with pytest.raises(OSError):
        compact(sweep)
    assert counts(sweep) == before and {t: files(sweep, t) for t in listed} == listed
    assert not [p for p in table_dir(sweep, "runs").iterdir() if ".tmp-" in p.name]


def test_a_stage_that_runs_again_after_compaction_replaces_its_packed_rows(sweep):
    compact(sweep)
    # run1 trains again from scratch (rlsweep doctor --fix) and so far has written its first interval and a new row
    write_run(sweep, 1, finished=False, status="running", steps=(1,))
    after = counts(sweep)
    assert after["steps"] == 4 * 4 - 2 and after["statuses"] == "completed,running,completed,running"
    assert rows_written_as(sweep, "runs", runs_file("rl", "0000000000d1")).to_pylist()[0]["status"] == "running"
    assert rows_written_as(sweep, "train_steps",
                           train_steps_file("rl", "0000000000d1", 3, 4)) is None  # superseded: the retrained stage has no step 3
    assert stage_rows(sweep, "train_steps", "rl", "0000000000d1").column("step").to_pylist() == [1, 2]
    # it finishes; the next compaction packs its new rows, and the older pack's rows of it stay hidden
    write_run(sweep, 1, status="completed")
    expected = counts(sweep)
    compact(sweep)
    assert counts(sweep) == expected and expected["steps"] == 16


@pytest.mark.slow  # compacts a store again and again
def test_packs_are_merged_once_a_table_has_max_packs(sweep, monkeypatch):
    compact(sweep)
    for i in range(10, 10 + compaction.MAX_PACKS):
        write_run(sweep, i)
        expected = counts(sweep)
        done = {c.table: c for c in compact(sweep)}
        assert counts(sweep) == expected
    assert done["runs"].merged == compaction.MAX_PACKS and done["runs"].files_after == 1 + 3  # one pack + run9's
    # a crash after the merged pack is in place but before the packs it replaces are deleted: still each row once
    write_run(sweep, 20)
    expected = counts(sweep)
    monkeypatch.setattr(compaction, "MAX_PACKS", 1)  # the one pack there is merged into the next
    real = compaction._remove_if
    monkeypatch.setattr(compaction, "_remove_if", lambda path, was: 0 if is_pack(path.stem) else real(path, was))
    compact(sweep)
    assert sum(is_pack(p.stem) for p in files(sweep, "runs")) == 2 and counts(sweep) == expected
    monkeypatch.setattr(compaction, "_remove_if", real)
    compact(sweep)  # the replaced packs go
    assert sum(is_pack(p.stem) for p in files(sweep, "runs")) == 1 and counts(sweep) == expected


def test_a_query_listed_before_a_compaction_still_reads_every_row_once(sweep):
    catalog = Catalog(sweep, SWEEP)
    before = catalog.query(COUNTS).to_pylist()
    compact(sweep)  # deletes files that catalog listed
    assert catalog.query(COUNTS).to_pylist() == before


def test_one_compaction_of_a_sweep_at_a_time(sweep):
    with compaction._locked(store_dir(sweep) / "tables"):
        with pytest.raises(CompactionBusy, match=f"pid {os.getpid()}"):
            compact(sweep)


def test_a_step0_evaluation_is_copied_from_a_pack(sweep):
    compact(sweep)
    copy_evaluation("0000000000d0", "0000000000e0", 0, ["math500"], results_root=sweep, sweep=SWEEP, run_id="0000000000df", eval_id="0000000000ef")
    record(sweep, SWEEP, [Member("eval", "0000000000ef")])
    rows = query("SELECT run_id, eval_id, count(*) AS n FROM eval_samples WHERE run_id = '0000000000df' GROUP BY ALL",
                 sweep, SWEEP).to_pylist()
    assert rows == [{"run_id": "0000000000df", "eval_id": "0000000000ef", "n": 2}]
    copied = pq.read_table(table_dir(sweep, "eval_samples") / f"{eval_file('0000000000df', '0000000000ef', 0, 'math500')}.parquet")
    assert "packed_from" not in copied.column_names


def every_row(root: Path, sweep: str = SWEEP) -> dict:
    """Every column of every row of each table, hashed and summed per stage job (the issue's query, per table). Of
    runs, the table's own columns: a flattened hyperparameter column takes its type from the files a view reads (an
    integer in one sweep's small files, a double once packed with other sweeps' rows), with or without damage."""
    def columns(t: str) -> str:
        return f"COLUMNS(lambda c: c IN ({', '.join(repr(n) for n in table_schema(t).names)}))" if t == "runs" else "COLUMNS(*)"

    return {t: query(f"SELECT run_id, count(*) AS n, sum(hash({columns(t)})) FROM {t} GROUP BY ALL ORDER BY ALL",
                     root, sweep).to_pylist() for t in ("runs", "train_steps", "eval_scores", "eval_samples")}


def pack_of(root: Path, table: str) -> Path:
    return next(p for p in files(root, table) if is_pack(p.stem))


def flip(path: Path) -> None:
    """256 bytes inverted at a third of the pack's data, its footer as it was (issue 80's damage)."""
    data = bytearray(path.read_bytes())
    end = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    i = 4 + (end - 4) // 3
    data[i:min(i + 256, end)] = bytes(b ^ 0xFF for b in data[i:min(i + 256, end)])
    path.write_bytes(bytes(data))


PACK_DAMAGE = {"flipped": flip, "truncated": lambda p: p.write_bytes(p.read_bytes()[:100]),
               "zero bytes": lambda p: p.write_bytes(b"")}


@pytest.mark.parametrize("damage", list(PACK_DAMAGE))
def test_doctor_names_a_damaged_packs_stage_jobs_and_fix_restores_it_from_its_mirror(sweep, damage):
    """A pack cut short has lost its footer, and with it the list of whose rows it held: its manifest keeps it. The
    pack's mirror (a copy compaction keeps outside the table folders) restores it: every query answers as before the
    damage, byte for byte, with nothing retrained."""
    compact(sweep)
    assert examine(sweep, SWEEP).problems == []
    before = every_row(sweep)
    pack = pack_of(sweep, "train_steps")
    PACK_DAMAGE[damage](pack)
    report = examine(sweep, SWEEP)
    assert [p.kind for p in report.problems] == ["damaged"]  # the pack alone: no stage job left without its rows
    (problem,) = report.problems
    assert "it held the rows of 3 stage job(s), of sweep(s) s (3)" in problem.what
    assert all(f"rl {0xd0 + i:012x} (s)" in problem.what for i in range(3))
    assert problem.replace_with == pack_mirror(pack) and "nothing reruns" in problem.recompute
    target, moved = quarantine(report)
    assert every_row(sweep) == before and examine(sweep, SWEEP).problems == []
    assert (target / pack.relative_to(store_dir(sweep))).is_file() and digest.check_path(pack).ok
    compact(sweep)  # and it packs on as before
    assert every_row(sweep) == before and examine(sweep, SWEEP).problems == []


def test_a_damaged_packs_rows_with_no_intact_mirror_are_recomputed_with_what_runs_after_them(sweep):
    """No intact mirror (damaged too, or a pack from before mirrors): the stage jobs that wrote the rows rerun, and
    the doctor says first which ones, and which jobs rerun after them."""
    compact(sweep)
    pack = pack_of(sweep, "train_steps")
    PACK_DAMAGE["truncated"](pack)
    PACK_DAMAGE["flipped"](pack_mirror(pack))
    problems = examine(sweep, SWEEP).problems
    assert "rl 0000000000d0 (s)" in problems[0].what and "mirror is gone or damaged" in problems[0].recompute
    reruns = {str(p.job): p for p in problems[1:]}
    assert set(reruns) == {f"rl {0xd0 + i:012x}" for i in range(3)}
    first = reruns["rl 0000000000d0"]
    assert "trains again from scratch" in first.recompute and first.target.name == DONE
    assert "after it, 2 stage job(s) of this sweep rerun too (eval 0000000000e0 of run 0000000000d0 (step 0" in first.what
    assert pack_mirror(pack) in problems[0].move  # (the damaged mirror goes to quarantine with its pack)


def two_sweeps(root: Path) -> None:
    """Sweep t's run 5, finished and compacted with sweep s's runs: one pack holds rows of both sweeps."""
    write_run(root, 5)
    record(root, "t", [Member("rl", f"{0xd5:012x}"), Member("eval", f"{0xe5:012x}")])
    compact(root)


def test_fix_for_one_sweep_never_takes_another_sweeps_rows_without_being_told(sweep):
    """Issue 80: `doctor --sweep s --fix` on a damaged pack moved the whole pack aside, and the rows it held of sweep t
    vanished from t's views without a word. Now, where only rerunning brings rows back, it marks s's stage jobs, names
    t's and what t would lose, and leaves the pack (which t's queries go on naming); `--also t` marks t's too."""
    two_sweeps(sweep)
    pack = pack_of(sweep, "eval_scores")
    pack_mirror(pack).unlink()  # no mirror: only rerunning the eval jobs brings their scores back
    flip(pack)
    report = examine(sweep, SWEEP)
    (problem, *reruns) = report.problems
    assert "of sweep(s) s (6), t (2)" in problem.what and problem.move == []  # eval jobs, two steps each
    assert "--also t" in problem.recompute and f"eval {0xe5:012x} of run {0xd5:012x} (step 0" in problem.recompute
    assert {p.job.stage_id for p in reruns} == {f"{0xe0 + i:012x}" for i in range(3)}  # s's six eval jobs only
    assert len(reruns) == 6
    quarantine(report)
    assert pack.is_file()
    assert [d.path for d in Catalog(sweep, "t").damaged] == [pack]  # t is still told, not silently short
    t_done = [stage_dir(sweep, "eval", f"{0xe5:012x}", f"{0xd5:012x}", step, GROUP) / DONE for step in (0, 4)]
    assert all(p.is_file() for p in t_done)
    report = examine(sweep, SWEEP, also=("t",))  # told to (s's, marked already, are listed again until they rerun)
    assert {f"eval {0xe5:012x} of run {0xd5:012x} (step {s}, {GROUP})" for s in (0, 4)} <= {
        str(p.job) for p in report.problems[1:]}
    quarantine(report)
    assert not pack.exists() and not any(p.is_file() for p in t_done)


def test_fix_for_one_sweep_restores_every_sweeps_rows_from_the_mirror(sweep):
    """Where the mirror is intact, nobody loses anything: fixing sweep s restores sweep t's rows too, and t's views
    answer exactly as before."""
    two_sweeps(sweep)
    before = every_row(sweep, "t")
    PACK_DAMAGE["zero bytes"](pack_of(sweep, "runs"))
    report = examine(sweep, SWEEP)
    assert "of sweep(s) s (9), t (3)" in report.problems[0].what and len(report.problems) == 1  # RL + eval jobs
    quarantine(report)
    assert every_row(sweep, "t") == before and examine(sweep, "t").problems == []


@pytest.mark.slow
def test_rlsweep_compact_and_the_aggregate_stage(sweep):
    env = {**os.environ, "RLSWEEP_AUTO_COMPACT": "1000"}
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "stage.py"), "aggregate", "--sweep", SWEEP,
                          "--results", str(sweep)], capture_output=True, text=True, env=env, cwd=sweep)
    assert out.returncode == 0, out.stderr
    assert not any(is_pack(p.stem) for p in files(sweep, "runs"))  # fewer files than asked for: left alone
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "stage.py"), "aggregate", "--sweep", SWEEP,
                          "--results", str(sweep)], capture_output=True, text=True, cwd=sweep,
                         env={**env, "RLSWEEP_AUTO_COMPACT": "10"})
    assert out.returncode == 0 and "compacted" in out.stderr, out.stderr
    assert sum(is_pack(p.stem) for p in files(sweep, "runs")) == 1
    out = subprocess.run([sys.executable, "-m", "workflow.cli", "compact", "--results", str(sweep)],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0 and "train_steps" in out.stdout, out.stderr


def test_a_query_of_a_compacted_store_decodes_no_fingerprint_and_an_old_pack_still_reads(sweep, monkeypatch):
    """Issue 64: a pack's fingerprints (what a leftover small file is told apart by) sit in their own footer entry,
    decoded only when a small file of a packed name is there; a query after compaction never needs them (they were
    most of its fixed cost at a thousand runs). A pack written in the format before (fingerprints in
    `rlsweep.pack` itself) reads as before. (A leftover is still told apart by its fingerprint: the crash tests above.)"""
    from workflow.results import packs
    before = counts(sweep)
    compact(sweep)
    decoded, named = [], []
    real = packs.Sources.fingerprints
    monkeypatch.setattr(packs.Sources, "fingerprints", lambda self: decoded.append(1) or real(self))
    from workflow.results import catalog
    real_member_of = catalog.member_of  # a sweep's catalog keeps a pack's stems by their stage job, not name by name
    monkeypatch.setattr(catalog, "member_of", lambda *a: named.append(a[2]) or real_member_of(*a))
    assert counts(sweep) == before and decoded == []
    packed = {stem for t in ("runs", "train_steps", "eval_scores", "eval_samples") for p in files(sweep, t)
              if is_pack(p.stem) for stem in packs.read_pack(p, pq.read_schema(p)).sources}
    assert packed and not set(named) & packed
    pack = next(p for p in files(sweep, "eval_scores") if is_pack(p.stem))
    stem = next(iter(packs.read_pack(pack, pq.read_schema(pack)).sources))
    layout = Catalog(sweep, SWEEP).layouts["eval_scores"]
    assert layout.holder(stem) == pack
    # the old format: the same pack with its footer rewritten as {"sources": {stem: fingerprint}, "replaces": []}
    table = pq.read_table(pack)
    meta = packs.read_pack(pack, pq.read_schema(pack))
    old = {packs.META_KEY: packs.json.dumps({"sources": dict(meta.sources.items()), "replaces": []})}
    pq.write_table(table.replace_schema_metadata(old), pack)
    monkeypatch.undo()
    assert counts(sweep) == before
    assert isinstance(packs.read_pack(pack, pq.read_schema(pack)).sources, dict)


def test_pyarrow_reads_no_table_file_through_a_python_file_object(sweep, monkeypatch):
    """Arrow reads a Python file object from its IO threads, and can drop it there after the read returned; at exit
    that aborted `rlsweep query` over a damaged pack ("terminate called without an active exception", ~1 run in
    120, CI of 3702ccd). So every reader of the store hands pyarrow Arrow's own file: listing, querying, the damaged
    pack's warning, doctor, and one stage's rows, intact and damaged."""
    import pyarrow as pa
    from pyarrow.parquet import core

    from workflow.cli.query import warn_damaged
    sources: list[object] = []

    def watched(real):
        def call(source, *args, **kwargs):
            sources.append(source)
            return real(source, *args, **kwargs)
        return call

    class Watched(core.ParquetFile):
        def __init__(self, source, *args, **kwargs):
            sources.append(source)
            super().__init__(source, *args, **kwargs)

    for module in (pq, core):  # read_schema and read_metadata make a ParquetFile of the core module's
        monkeypatch.setattr(module, "ParquetFile", Watched)
        monkeypatch.setattr(module, "read_table", watched(core.read_table))
    compact(sweep)
    every_row(sweep)
    PACK_DAMAGE["truncated"](pack_of(sweep, "train_steps"))
    catalog = Catalog(sweep, SWEEP)
    every_row(sweep)
    warn_damaged(catalog.left_out, root=catalog.root)
    examine(sweep, SWEEP)
    stage_rows(sweep, "eval_scores", "eval", f"{0xe0:012x}")
    assert len(sources) > 20  # (the probe sees the reads)
    assert [s for s in sources if not isinstance(s, (str, os.PathLike, pa.NativeFile))] == []
    assert not any(isinstance(s, pa.PythonFile) for s in sources)
