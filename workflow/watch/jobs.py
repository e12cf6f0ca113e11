"""One stage job's state as `rlsweep watch` shows it, from the files the job and the SLURM executor leave in its
directory and from squeue's line for it (the caller's one squeue call per refresh):

    done      its DONE file (or PRUNED.json: an Optuna pruner stopped it)
    queued    SLURM lists the job it was last submitted as (SLURM.json) as pending: job id and squeue's reason
    running   SLURM runs it (node), or its RUNNING.lock's heartbeat is fresh (host)
    failed    its runs row says failed / interrupted, SLURM gave up on it (SLURM.json's final state), or it says
              running with neither a heartbeat nor a SLURM job: killed
    pending   none of those: its turn has not come

Reads only; every file read goes through a `Files` cache keyed by (size, mtime), so a refresh rereads what changed.
"""

from __future__ import annotations

import json
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from workflow.layout import JOB_LOG, LIVE, SLURM_RECORD
from workflow.live import parse_live
from workflow.runlock import LOCK_NAME, STALE_S, owner_alive
from workflow.slurm.cluster import JobState
from workflow.study.pruning import MARKER as PRUNED
from workflow.watch.reasons import classify, log_tail

STATES = ("pending", "queued", "running", "failed", "done")
HOST = socket.gethostname()  # a lock's owner on this host is checked by its pid (runlock.owner_alive)
RUNNING = ("RUNNING", "COMPLETING", "CONFIGURING", "STAGE_OUT")  # squeue states in which the job holds its nodes


@dataclass(frozen=True)
class JobView:
    state: str  # one of STATES
    detail: str = ""  # queued: "job 123: Priority"; running: its node; failed: the reason class; pending: why waiting
    log: str | None = None  # the job's log file, when known (a SLURM job's)
    live: dict[str, Any] | None = None  # its live file (workflow/live.py), when it has one
    when: float | None = None  # a failure's time (epoch s): the footer lists the newest first
    error: str | None = None  # a failure's recorded error (the runs row's), for the log-less


class Files:
    """Parsed files by path, reread only when their size or modification time changes (a watch refreshes every few
    seconds over thousands of jobs, most of which changed nothing).

    A file not read before is opened once and its bytes parsed (`os.open`, `fstat`, `read`: a quarter of what a
    `stat` then `Path.read_text` cost, ~20 against ~80 us, and a first look at 10,000 runs reads ~20,000 files); one
    already read is `stat`ed, and read again only if it changed. Only regular files are read (a FIFO would block)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], tuple[tuple[int, int], Any]] = {}

    def read(self, path: str | Path, parse: Callable[[bytes], Any], kind: str = "") -> Any:
        """`parse(bytes)` of the file at `path` (None: no such file, or not a regular one)."""
        key = (kind, os.fspath(path))  # (a str: hashing or formatting a Path costs more than reading its stat)
        hit = self._cache.get(key)
        if hit is not None:
            try:
                st = os.stat(key[1])
            except OSError:
                self._cache.pop(key, None)
                return None
            if (st.st_size, st.st_mtime_ns) == hit[0]:
                return hit[1]
        try:
            fd = os.open(key[1], _READ)
        except OSError:
            self._cache.pop(key, None)
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            data = _read_all(fd, st.st_size)
        except OSError:
            return None
        finally:
            os.close(fd)
        value = parse(data)
        self._cache[key] = ((st.st_size, st.st_mtime_ns), value)
        return value

    def json(self, path: str | Path) -> dict[str, Any] | None:
        return self.read(path, _json, "json")

    def live(self, directory: str | Path) -> dict[str, Any] | None:
        return self.read(f"{directory}/{LIVE}", parse_live, "live")

    def runs_row(self, path: str | Path) -> dict[str, Any] | None:
        return self.read(path, _runs_row, "runs")

    def tail(self, log: str | None) -> str:
        """The end of a job's log ("" without one): only its end is read, reread when the log changed."""
        if not log:
            return ""
        try:
            st = os.stat(log)
        except OSError:
            return ""
        key, stamp = ("tail", log), (st.st_size, st.st_mtime_ns)
        hit = self._cache.get(key)
        if hit is None or hit[0] != stamp:
            hit = self._cache[key] = (stamp, log_tail(log))
        return hit[1] or ""


_READ = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)  # (O_NONBLOCK: opening a FIFO does not wait)


def _read_all(fd: int, size: int) -> bytes:
    chunks = []
    while True:  # (to the end: a file appended to since its fstat is read whole, and reread at the next change)
        chunk = os.read(fd, max(size, 4096) + 1)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _json(data: bytes) -> dict[str, Any] | None:
    try:
        found = json.loads(data)
    except ValueError:  # being replaced, or foreign: absent for this refresh
        return None
    return found if isinstance(found, dict) else None


_ROW_COLUMNS = ("status", "error", "finished_at", "wall_s", "gpu_hours", "gpus")


def _runs_row(data: bytes) -> dict[str, Any] | None:
    """A stage job's runs row from its own (small) file: a job that is not done was never packed."""
    try:  # (one thread, no pre-buffering: for a file of one row, starting them cost 2/3 of the read)
        with pq.ParquetFile(pa.BufferReader(data), pre_buffer=False) as f:  # (gpus: in rows written since they say
            names = f.schema_arrow.names  # what a job ran on)
            rows = f.read(columns=[c for c in _ROW_COLUMNS if c in names], use_threads=False).to_pylist()
    except Exception:  # noqa: BLE001 - damaged or half-replaced: `rlsweep doctor` names it; absent here
        return None
    if not rows:
        return None
    row = rows[-1]
    if row.get("finished_at") is not None:
        row["finished_at"] = row["finished_at"].timestamp()
    return row


def _heartbeat(directory: str, now: float) -> bool:
    """Whether the job's RUNNING.lock was renewed within STALE_S (its owner renews it every HEARTBEAT_S)."""
    try:
        return now - os.stat(f"{directory}/{LOCK_NAME}").st_mtime < STALE_S
    except OSError:
        return False


def stage_job(directory: str | Path, done: str | Path, runs_row: str | Path,
              squeue: Callable[[], dict[str, JobState] | None],
              files: Files, now: float) -> JobView:
    """The state of the stage job whose outputs are in `directory`, finished when `done` exists, whose runs row
    file is `runs_row`. `squeue()`: this user's jobs by id (None: the scheduler did not answer); called only for a
    job the SLURM executor submitted."""
    directory = os.fspath(directory)  # (joined as strings: a refresh looks at thousands of jobs)
    try:  # one listing, then only the files that are there: most jobs of a big sweep have few or none
        names = set(os.listdir(directory))
    except OSError:
        return JobView("pending")  # no directory: nothing has started it, nor submitted it
    live = files.live(directory) if LIVE in names else None
    if os.path.basename(done) in names:
        return JobView("done", live=live)
    if PRUNED in names:
        return JobView("done", "pruned", live=live)
    record = files.json(f"{directory}/{SLURM_RECORD}") if SLURM_RECORD in names else None
    # (SLURM.json and LIVE.json name a log relative to the stage directory; an older one's absolute path still reads)
    log = (record or {}).get("log") or (live or {}).get("log") or (JOB_LOG if JOB_LOG in names else None)
    log = os.path.join(directory, log) if log else None
    queue = squeue() if record is not None else None
    if queue is not None:
        listed = queue.get(str(record.get("job_id")))
        if listed is not None and listed.active:
            if listed.state in RUNNING:
                return JobView("running", listed.node or "", log, live)
            return JobView("queued", f"job {record.get('job_id')}: {listed.reason or listed.state}", log, live)
    owner = files.json(f"{directory}/{LOCK_NAME}") if LOCK_NAME in names else None
    # the one liveness rule (runlock.owner_alive): SLURM's word from this refresh's squeue answer, then this host's
    # pid, then the lock's heartbeat; a lock nobody reads (being written) goes by its heartbeat alone
    alive = owner is not None and (owner_alive(owner, HOST, queue if record is not None else None,
                                               _heartbeat(directory, now)) if owner else _heartbeat(directory, now))
    if alive:  # (before its runs row: a running job's row says only "running", and reading it is most of a look)
        return JobView("running", str(owner.get("host") or ""), log, live)
    row = files.runs_row(runs_row)
    status, error = (row or {}).get("status"), (row or {}).get("error")
    if record is not None and record.get("state"):  # the executor gave up on it
        return JobView("failed", classify(record["state"], error, files.tail(log)), log, live,
                       when=record.get("time"), error=error)
    if status in ("failed", "interrupted"):
        reason = "interrupted" if status == "interrupted" else classify(None, error, files.tail(log))
        return JobView("failed", reason, log, live, when=(row or {}).get("finished_at"), error=error)
    if status == "running":  # started, and now neither renews its lock nor is a SLURM job in the queue
        if record is not None and queue is None:
            return JobView("running", "(squeue did not answer)", log, live)
        gone = ("its process is gone" if owner and owner.get("host") == HOST and not owner.get("slurm_job_id")
                else "its heartbeat stopped")
        return JobView("failed", f"killed ({gone})", log, live, when=(live or {}).get("updated_at"), error=error)
    if status == "preempted":
        return JobView("pending", "preempted: to be requeued", log, live)
    if status == "paused":
        return JobView("pending", "next segment", log, live)
    return JobView("pending", "", log, live)
