"""A running training stage's live file: where it is between checkpoints, for `rlsweep watch` and `rlsweep status`.

The exactly-once Parquet rows of `train_steps` land when a checkpoint is written (results/train_log.py), which on a
GPU run can be an hour apart. So each training job also keeps `LIVE.json` in its stage directory (layout.LIVE),
rewritten atomically (write-then-rename: a reader sees the old file or the new one) at most every `every_s`
seconds, and always at the job's first and last step:

    {"stage": "rl", "id": ..., "step": 37, "total": 500, "until": 100,      # until: this job's last step (a segment)
     "first_step": 21, "started_at": <epoch s>, "updated_at": <epoch s>,     # first_step: this job's first step
     "s_per_step": 41.2, "metrics": {"reward": 0.31, "entropy": 0.52, ...},  # the last recorded step's numbers
     "host": ..., "pid": ..., "slurm_job_id": ..., "gpus": 8, "log": ...}   # log: the job's log file, when it has one,
                                                                              # relative to the stage directory

It is a view, never a source of truth: nothing reads it to decide anything, a missing or torn one is just absent,
and the file stays after the job ends (its last state). Light on purpose (no torch, no pyarrow): the writer runs in
every training process, the reader in every refresh of `watch`.
"""

from __future__ import annotations

import json
import math
import os
import socket
import stat
import time
from pathlib import Path
from typing import Any

from workflow.atomic import write_text
from workflow.capture import JOB_LOG_ENV
from workflow.layout import LIVE
from workflow.devices import device_used


def _log_file(directory: Path) -> str | None:
    """The job's log (capture.keep_log: the stage job's, which the processes it starts inherit), else the file this
    process's stderr (else stdout) goes to when it is one, as a path relative to the stage's `directory`: a log
    outside it is not named (a machine path under results/ points at nothing once the results are copied or mounted
    elsewhere). A terminal or a pipe is no file to point a user at."""
    found = os.environ.get(JOB_LOG_ENV)
    for fd in (2, 1):
        if found:
            break
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                found = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
    if not found:
        return None
    try:
        return os.path.relpath(Path(found).resolve(), Path(directory).resolve()) if Path(directory).resolve() in \
            Path(found).resolve().parents else None
    except (OSError, ValueError):
        return None


def _gpus(stage: str) -> int:
    """The GPUs this job trains on: its SLURM allocation's (per node x nodes), else those it can see
    (provenance.device_used: 0 on a CPU machine)."""
    try:
        per_node = int(os.environ.get("SLURM_GPUS_ON_NODE", "0") or 0)
        allocated = per_node * int(os.environ.get("SLURM_JOB_NUM_NODES", "1") or 1)
    except ValueError:
        allocated = 0
    return allocated or device_used(stage)["gpus"]


def _number(v: Any) -> float | int | None:
    """A metric as JSON holds it: finite numbers only (NaN and inf are not JSON), booleans as 0/1."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)) and math.isfinite(v):
        return v
    return None


class LiveFile:
    """The writer, one per training job: `update(step, row)` after every recorded step."""

    def __init__(self, directory: str | Path, stage: str, stage_id: str, total: int, until: int | None = None,
                 every_s: float = 2.0, clock=time.time):
        self.path = Path(directory) / LIVE
        self.every_s, self.clock = every_s, clock
        self.last_write = -math.inf
        self.first: tuple[int, float] | None = None  # (step, time) of this job's first recorded step
        self.state: dict[str, Any] = {
            "stage": stage, "id": stage_id, "total": int(total), "until": int(until or total),
            "host": socket.gethostname(), "pid": os.getpid(), "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "gpus": _gpus(stage), "log": _log_file(Path(directory)), "started_at": clock()}

    def update(self, step: int, row: dict[str, Any]) -> None:
        now = self.clock()
        first = self.first is None
        if first:  # this job's first step after a (re)start: the rate counts from here (loading is no step)
            self.first = (step, now)
            self.state["first_step"] = step
        if now - self.last_write < self.every_s and not first and step < self.state["until"]:
            return
        done = step - self.first[0]
        self.state.update(step=int(step), updated_at=now,
                          s_per_step=(now - self.first[1]) / done if done > 0 else None,
                          metrics={k: n for k, v in row.items() if (n := _number(v)) is not None and k != "step"})
        try:
            write_text(self.path, json.dumps(self.state, sort_keys=True))
        except OSError:  # a full disk or a vanished directory: the view goes stale, the training goes on
            return
        self.last_write = now


def read_live(directory: str | Path) -> dict[str, Any] | None:
    """The stage's live file, or None when it has none (or one that cannot be read: torn by a full disk, foreign)."""
    try:
        return parse_live((Path(directory) / LIVE).read_bytes())
    except OSError:
        return None


def parse_live(data: bytes) -> dict[str, Any] | None:
    """A live file's contents as read_live gives them (None: torn, foreign)."""
    try:
        found = json.loads(data)
    except ValueError:
        return None
    return found if isinstance(found, dict) and isinstance(found.get("step"), int) else None
