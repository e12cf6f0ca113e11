"""Which stage jobs of the shared store belong to which sweep.

Stage outputs and their table rows live once in results/_store/ (layout.py), whichever sweep computed them; a sweep
is the set of stage jobs it planned. Each time Snakemake runs a sweep (before any job; a dry run writes nothing),
the set is recorded in results/<sweep>/members/<digest>.parquet (one row per stage job: sweep, stage, stage_id,
label, recorded_at):

- a set already recorded (the same digest) is not written again, so running an unchanged sweep writes nothing;
- a new set is written beside the older ones, which are then removed if the new one holds all of their rows: an
  Optuna study's trials (each nested snakemake records the runs known so far) only ever add files that replace
  the last, and two drivers recording at once never lose each other's runs (each removes only what it holds);
- a sweep's members are the union of its files: a run dropped from the sweep file stays the sweep's (its results
  still show in the sweep's views, as they did when each sweep had its own directory); `rlsweep gc` asks the sweep
  files, not these records, what is still referenced.

The label (the grid point's settings, `Run.label`) is the sweep's: a run another sweep computed under another label
shows under this sweep's label in this sweep's views (Catalog). The newest recording of a stage job's label wins.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from workflow.layout import SWEEP_NAME, members_dir
from workflow.results import digest
from workflow.results.files import UNREADABLE, arrow_file
from workflow.results.writer import parquet_bytes, write_parquet

MEMBERS = pa.schema([("sweep", pa.string()), ("stage", pa.string()), ("stage_id", pa.string()),
                     ("label", pa.string()), ("recorded_at", pa.timestamp("us", tz="UTC"))])


@dataclass(frozen=True)
class Member:
    """One stage job a sweep planned: (stage, stage id), and for an RL run or an eval its label in the sweep."""

    stage: str
    stage_id: str
    label: str | None = None


def record(results_root: str | Path, sweep: str, members: Iterable[Member]) -> Path | None:
    """Record that `sweep` planned these stage jobs; returns the file written (None: this set was recorded)."""
    rows = _rows(members)
    digest = hashlib.sha256(json.dumps([sweep, rows]).encode()).hexdigest()[:16]
    directory = members_dir(results_root, sweep)
    path = directory / f"{digest}.parquet"
    if path.is_file() and damage(path) is None:  # a damaged record of this same plan is written again
        return None
    older = {p: _keys(p) for p in directory.glob("*.parquet")}
    write_parquet(_table(sweep, rows), path)
    mine = set(rows)
    for p, keys in older.items():
        if keys is not None and keys <= mine:
            p.unlink(missing_ok=True)
    return path


def record_bytes(sweep: str, members: Iterable[Member]) -> bytes:
    """A members file's content for these stage jobs (`rlsweep doctor --fix` rebuilds a damaged one from the sweep
    file's plan)."""
    return parquet_bytes(_table(sweep, _rows(members)))


def _rows(members: Iterable[Member]) -> list[tuple]:
    return sorted({(m.stage, m.stage_id, m.label) for m in members}, key=lambda r: (r[0], r[1], r[2] or ""))


def _table(sweep: str, rows: list[tuple]) -> pa.Table:
    now = dt.datetime.now(dt.timezone.utc)
    return pa.table({"sweep": [sweep] * len(rows), "stage": [r[0] for r in rows], "stage_id": [r[1] for r in rows],
                     "label": [r[2] for r in rows], "recorded_at": [now] * len(rows)}, schema=MEMBERS)


def _keys(path: Path) -> set[tuple] | None:
    """A members file's rows as (stage, stage_id, label); None if it does not read (left alone)."""
    try:
        t = _read(path)
    except UNREADABLE:
        return None
    return set(zip(t["stage"].to_pylist(), t["stage_id"].to_pylist(), t["label"].to_pylist()))


def damage(path: Path, deep: bool = True) -> str | None:
    """Why a members file does not read (None: it reads). Not `deep`: its footer and columns only, as the catalog
    checks a table file before a query (a file cut short has no footer); `deep` decodes it whole (doctor, record)."""
    try:
        if deep:
            _read(path)
        else:
            with arrow_file(path) as f:
                missing = set(MEMBERS.names) - set(pq.read_schema(f).names)
            if missing:
                return f"not a members file: no column {', '.join(sorted(missing))}"
        verdict = digest.check_path(path)  # (a record is a few KB: checked in full every time)
        if not verdict.ok:
            return verdict.reason
    except UNREADABLE as e:
        return str(e).strip().rstrip(".") or type(e).__name__
    return None


def _read(path: Path) -> pa.Table:
    with arrow_file(path) as f:  # a regular file only (a FIFO would block, a symlink lead elsewhere)
        # ParquetFile, not read_table: the latter goes through pyarrow.dataset, which imports pandas (seconds
        # for `rlsweep query`, which checks every sweep's records)
        return pq.ParquetFile(f).read(columns=["stage", "stage_id", "label", "recorded_at"])


def member_files(results_root: str | Path, sweep: str | None = None) -> list[Path]:
    """The members files of one sweep, or of every sweep of the results directory."""
    if sweep is not None:
        return sorted(members_dir(results_root, sweep).glob("*.parquet"))
    return sorted(p for p in Path(results_root).glob("*/members/*.parquet") if SWEEP_NAME.fullmatch(p.parent.parent.name))


def members(results_root: str | Path, sweep: str) -> dict[tuple[str, str], str | None]:
    """(stage, stage id) -> label of every stage job the sweep planned ({}: none recorded)."""
    out: dict[tuple[str, str], tuple] = {}
    for path in member_files(results_root, sweep):
        try:
            t = _read(path)
        except UNREADABLE:
            continue  # a damaged record: queries warn and `rlsweep doctor` lists it; planning the sweep again
            # (`snakemake`, not a dry run) writes it anew, `rlsweep doctor --fix` from the runs rows or the sweep file
        # the recording times compared as integers (microseconds): as datetimes, with their time zone, they cost
        # ~3 us each to make, most of a compacted sweep's query setup at 1,000 runs (bench/compaction.py)
        at_us = t["recorded_at"].cast(pa.int64()).to_pylist()
        for stage, stage_id, label, at in zip(*(t[c].to_pylist() for c in ("stage", "stage_id", "label")), at_us):
            if (stage, stage_id) not in out or at >= out[(stage, stage_id)][1]:
                out[(stage, stage_id)] = (label, at)
    return {k: v[0] for k, v in out.items()}


def sweeps_of(results_root: str | Path, jobs) -> dict[str, list[tuple[str, str]]]:
    """Of these stage jobs ((stage, stage id) pairs), which each sweep of the results directory planned: sweep ->
    its jobs among them (a job no sweep planned is in none)."""
    wanted = set(jobs)
    out = {}
    for sweep in recorded_sweeps(results_root):
        mine = [key for key in members(results_root, sweep) if key in wanted]
        if mine:
            out[sweep] = sorted(mine)
    return out


def recorded_sweeps(results_root: str | Path) -> list[str]:
    """The sweeps with a recorded plan under the results directory."""
    return sorted({p.parent.parent.name for p in member_files(results_root)})
