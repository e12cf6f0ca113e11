"""One run, one process: a lock file in the stage's directory that names its owner.

Two copies of one training run would write the same checkpoints and table files. That happens on clusters: two
`snakemake` invocations over the same results (one with --nolock, or one per login node), a job that SLURM
requeued while a stale copy still runs, or a user starting a stage by hand. The lock is created with O_EXCL (atomic
on local and NFS v3+ file systems) and holds the owner's SLURM job id, restart count, host and pid, so a refusal
says who holds it. A lock left by a dead owner is taken over:
- same SLURM job, lower restart count: the previous incarnation of a requeued job (it was killed before requeue);
- another SLURM job that squeue no longer lists as active;
- same host, no SLURM job, process gone (or its pid reused by another process).
An owner on another host without a SLURM job cannot be checked from here: the message says how to clear it.

While held, the lock file's modification time is renewed every HEARTBEAT_S seconds, so that a process waiting for
a twin (`wait_for`) can tell an owner that still runs from one that died on another host: no renewal for STALE_S
seconds of its own waiting (clocks of two hosts are never compared).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from workflow.provenance import slurm_job_name, slurm_restart_count
from workflow.slurm import cluster

LOCK_NAME = "RUNNING.lock"
HEARTBEAT_S = 10.0
STALE_S = 90.0


class RunLocked(RuntimeError):
    """The stage is held by another process (the message names it)."""


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat): tells a reused pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def me() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": process_start(os.getpid()),
            "slurm_job_id": slurm_job_name(),
            "restart_count": slurm_restart_count(),
            "since": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


ASK = object()  # owner_alive's `queue`: ask squeue now (one call for this owner)


def owner_alive(owner: dict[str, Any], host: str, queue: Any = ASK, heartbeat: bool | None = None) -> bool:
    """The one liveness rule (run_lock's take-over, a twin's wait, `rlsweep watch` and `status`): whether the process
    named in a stage's lock still runs. SLURM's word first, for an owner that is a SLURM job: `queue` is the caller's
    one squeue answer for this refresh (job id -> JobState; None: the scheduler did not answer), or ASK; then, on
    the same host, its pid (gone, or reused by another process: dead); then the lock's `heartbeat` (renewed within
    STALE_S, as the caller measured it); with none of them to go by, alive (a lock is never taken from an owner
    nobody can check)."""
    job = owner.get("slurm_job_id")
    if job:
        if queue is ASK:
            try:
                queue = cluster.job_states([job], retries=1)
            except cluster.SlurmError:
                queue = None
        if queue is not None:
            listed = queue.get(str(job))
            return listed is not None and listed.active
    if owner.get("host") == host:
        pid = owner.get("pid")
        return isinstance(pid, int) and process_start(pid) is not None and process_start(pid) == owner.get("pid_start")
    return True if heartbeat is None else heartbeat


def owner_is_gone(owner: dict[str, Any], mine: dict[str, Any]) -> bool:
    job = owner.get("slurm_job_id")
    if job and job == mine.get("slurm_job_id"):  # a requeued job's earlier incarnation
        return owner.get("restart_count", 0) < mine["restart_count"]
    return not owner_alive(owner, mine["host"])


def describe(owner: dict[str, Any]) -> str:
    who = f"SLURM job {owner['slurm_job_id']} (restart {owner.get('restart_count', 0)}) " if owner.get(
        "slurm_job_id") else ""
    return f"{who}pid {owner.get('pid')} on {owner.get('host')} since {owner.get('since')}"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # being written right now, or garbage: treated as held by an unknown owner


def holder(directory: Path) -> str | None:
    """Who holds the stage's lock, described (None: no lock, or its owner is gone). An owner that cannot be checked
    from here (another host, no SLURM) counts as holding it: callers that would move or delete the stage wait."""
    owner = _read(Path(directory) / LOCK_NAME)
    if owner is None or (owner and owner_is_gone(owner, me())):
        return None
    return describe(owner) if owner else "an unknown owner"


@contextmanager
def run_lock(directory: Path, what: str) -> Iterator[dict[str, Any]]:
    """Hold `directory/RUNNING.lock` for the duration of the block, or raise RunLocked naming the owner."""
    path = Path(directory) / LOCK_NAME
    mine = me()
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = _read(path)
            if owner is None:
                continue  # released in the meantime
            if owner and owner_is_gone(owner, mine):
                # rename first: of two processes taking over the same stale lock only one rename succeeds
                try:
                    os.replace(path, path.with_name(f".{LOCK_NAME}.stale-{os.getpid()}"))
                except FileNotFoundError:
                    continue
                path.with_name(f".{LOCK_NAME}.stale-{os.getpid()}").unlink(missing_ok=True)
                continue
            raise RunLocked(f"{what} is already running: {describe(owner) if owner else 'owner unknown'} holds "
                            f"{path}. If that job or process is gone, delete the lock file and run again.") from None
        with os.fdopen(fd, "w") as f:
            json.dump(mine, f)
        break
    else:
        raise RunLocked(f"{what}: could not take {path} (it keeps changing hands)")
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(path, stop), name="rlsweep-lock-heartbeat", daemon=True)
    beat.start()
    try:
        yield mine
    finally:
        stop.set()
        beat.join()
        if _read(path) == mine:
            path.unlink(missing_ok=True)


def _heartbeat(path: Path, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_S):
        try:
            os.utime(path)
        except OSError:  # taken over or removed by hand: nothing to renew
            return


def wait_for(directory: Path, what: str, say=print) -> None:
    """Wait until nobody holds `directory/RUNNING.lock` (a twin: another driver running the same stage). An owner
    whose lock is not renewed for STALE_S seconds of this wait (a process that died on another host) ends the wait
    with RunLocked, as run_lock refuses it."""
    path = Path(directory) / LOCK_NAME
    said, seen, still = False, None, time.monotonic()
    while True:
        try:
            mtime = path.stat().st_mtime_ns
        except FileNotFoundError:
            return
        owner, now = _read(path), time.monotonic()
        if mtime != seen:  # renewed: its owner runs (no need to ask SLURM, once a second, for every waiting job)
            seen, still = mtime, now
        elif now - still > 2 * HEARTBEAT_S and owner and owner_is_gone(owner, me()):
            return  # run_lock takes it over
        elif now - still > STALE_S:
            raise RunLocked(f"{what}: {describe(owner) if owner else 'an unknown owner'} holds {path} but has not "
                            f"renewed it for {STALE_S:.0f} s: if that job or process is gone, delete the lock file "
                            "and run again.")
        if not said:
            say(f"{what} is being run by {describe(owner) if owner else 'another process'} (another driver): "
                "waiting for it, then using its result")
            said = True
        time.sleep(1.0)
