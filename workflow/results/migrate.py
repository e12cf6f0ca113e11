"""Results made before the shared store, moved into it.

Until the store, each sweep kept its stage outputs and tables in its own directory: results/<sweep>/{data, overlap,
sft, rl, eval, tables}/. `migrate` moves them into results/_store/ (layout.py), by renames on the same file system
(no copy, however large a checkpoint), and records what each sweep had as its membership (membership.py), labels
taken from its own runs rows. A stage two sweeps both computed (the same id: what the store now prevents) keeps the
copy computed first (the oldest DONE.json: every stage after it was computed later, so Snakemake reruns nothing);
the other copy, and its own table files, go to results/_store/quarantine/<time>-migrate/<sweep>/, never deleted. DONE.json files are moved untouched (their times are what Snakemake compares), and their paths inside
are relative to their own directory, so every checkpoint they name moves with them.

Snakemake (the Snakefile, before planning) and the commands that read results run it on their own; it is quick
when there is nothing to move (a look at the results directory's top level). A sweep with a stage still running
under the old layout (its RUNNING.lock held) is left for later, with a message.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from workflow.layout import (DONE, STAGES, STORE, SWEEP_NAME, StageJob, quarantine_dir, stage_jobs, store_dir,
                             sweep_dir, table_dir, table_file_key)
from workflow.results.files import arrow_file
from workflow.results.membership import Member, record
from workflow.results.schemas import TABLES
from workflow.runlock import holder

_OLD = (*STAGES, "tables")  # what a sweep's directory held before the store


@dataclass
class Migrated:
    sweep: str
    moved: int = 0  # stage directories moved into the store
    duplicates: int = 0  # stage directories (and their table files) another sweep had: quarantined
    files: int = 0  # table files moved
    kept_back: str = ""  # why the sweep was left as it is (a stage still running)

    def __str__(self) -> str:
        if self.kept_back:
            return f"{self.sweep}: not migrated yet: {self.kept_back}"
        dup = f", {self.duplicates} computed by another sweep too (the copy went to quarantine)" if self.duplicates else ""
        return f"{self.sweep}: {self.moved} stage outputs and {self.files} table files moved into {STORE}/{dup}"


def legacy_sweeps(results_root: str | Path) -> list[str]:
    """The sweeps whose directory still holds stage outputs or tables of the layout before the store."""
    root = Path(results_root)
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if SWEEP_NAME.fullmatch(d.name) and d.is_dir()
                  and any((d / name).is_dir() for name in _OLD))


def migrate(results_root: str | Path) -> list[Migrated]:
    """Move every legacy sweep's results into the store (one migration at a time: a lock in the store)."""
    root = Path(results_root)
    store_dir(root).mkdir(parents=True, exist_ok=True)
    with open(store_dir(root) / ".migrate.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        sweeps = legacy_sweeps(root)
        jobs = {sweep: stage_jobs(root, sweep_dir(root, sweep)) for sweep in sweeps}
        out = {sweep: Migrated(sweep) for sweep in sweeps}
        for sweep in sweeps:
            running = next(((j, who) for j in jobs[sweep] if (who := holder(j.dir_under(sweep_dir(root, sweep)))) is not None),
                           None)
            if running is not None:
                out[sweep].kept_back = (f"{running[0]} is running ({running[1]}); run `rlsweep migrate` once it "
                                        "has finished")
                del jobs[sweep]
        keep = _first_computed(root, jobs)
        for sweep in jobs:
            _migrate_sweep(root, sweep, jobs[sweep], keep, quarantine_dir(root) / f"{stamp}-migrate" / sweep,
                           out[sweep])
        return list(out.values())


def _first_computed(root: Path, jobs: dict[str, list[StageJob]]) -> dict[StageJob, str]:
    """Of a stage job several sweeps computed, the copy to keep: the finished one with the oldest DONE.json. Every
    stage after it, in whichever sweep, was computed after it, so Snakemake (which reruns a job whose input is newer
    than its output) reruns nothing; a stage already in the store stays."""
    best: dict[StageJob, tuple[float, str]] = {}
    for sweep, found in jobs.items():
        for job in found:
            try:
                when = (job.dir_under(sweep_dir(root, sweep)) / DONE).stat().st_mtime
            except OSError:
                when = float("inf")  # unfinished: any finished copy goes first
            if job not in best or when < best[job][0]:
                best[job] = (when, sweep)
    return {job: sweep for job, (_, sweep) in best.items()}


def migrate_if_needed(results_root: str | Path, say=None) -> list[Migrated]:
    """`migrate`, saying what it did (stderr) when there was something to move."""
    if not legacy_sweeps(results_root):
        return []
    done = migrate(results_root)
    for m in done:
        (say or (lambda line: print(line, file=sys.stderr)))(f"rlsweep: results of the layout before the shared "
                                                             f"store: {m}")
    return done


def _migrate_sweep(root: Path, sweep: str, jobs: list[StageJob], keep: dict[StageJob, str], aside: Path,
                   out: Migrated) -> None:
    old = sweep_dir(root, sweep)
    labels = _labels(old / "tables" / "runs")
    members, duplicated = [], set()
    for job in jobs:
        src, dst = job.dir_under(old), job.dir(root)
        members.append(Member(job.stage, job.stage_id, labels.get(job.key)))
        if keep[job] != sweep or dst.exists():  # another sweep's copy is kept: this one is set aside
            _move(src, aside / src.relative_to(old))
            duplicated.add(job.key)
            out.duplicates += 1
        else:
            _move(src, dst)
            out.moved += 1
    for table in TABLES:
        for f in sorted((old / "tables" / table).glob("*.parquet")):
            dst = table_dir(root, table) / f.name
            if dst.exists() or table_file_key(table, f.stem) in duplicated:
                _move(f, aside / f.relative_to(old))
            else:  # (packs too: packs.resolve reads each stage job's rows from one place whatever holds them)
                _move(f, dst)
                out.files += 1
    record(root, sweep, members)
    for name in _OLD:  # what is left: empty directories, and files no stage wrote (moved aside, never deleted)
        _prune(old / name, aside)


def _labels(runs: Path) -> dict[tuple[str, str], str]:
    """(stage, stage id) -> label, from a legacy sweep's runs files (its own small files and packs)."""
    out = {}
    for f in sorted(runs.glob("*.parquet")):
        try:
            with arrow_file(f) as fh:
                t = pq.read_table(fh, columns=["stage", "run_id", "label"])
        except (pa.ArrowException, OSError, KeyError):
            continue
        for stage, run_id, label in zip(*(t[c].to_pylist() for c in ("stage", "run_id", "label"))):
            if label is not None:
                out[(stage, run_id)] = label
    return out


def _move(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.replace(src, dst)  # the same file system: a rename


def _prune(directory: Path, aside: Path) -> None:
    """Remove the empty directories under `directory` (itself too); anything else left is moved aside."""
    if not directory.is_dir():
        return
    for d, subdirs, files in os.walk(directory, topdown=False):
        for name in files:
            f = Path(d) / name
            _move(f, aside / f.relative_to(directory.parent))
        try:
            os.rmdir(d)
        except OSError:
            pass
