"""Why a stage job failed, as one class a researcher acts on: the scheduler's verdict first (it knows when a job ran
out of time, memory or its node), else what the job's error and log say (CUDA running out of memory, NCCL), else
the last line of its Python exception."""

from __future__ import annotations

import re
from pathlib import Path

SCHEDULER = ("TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED")  # SLURM states that are their own reason
# what a job's error text or log shows, in the order they are looked for: the first found names the class
TEXT = (("CUDA out of memory", re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")),
        ("NCCL error", re.compile(r"\bNCCL (?:error|WARN)|ncclSystemError|ncclInternalError|ProcessGroupNCCL|"
                                  r"NCCL communicator")))
# the line Python prints last for an uncaught exception: `Name: message` (a dotted name, ending Error/Exception...)
EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Locked|Problem)\b(?::.*)?$")
TAIL_BYTES = 16384


def log_tail(path: str | Path | None, size: int = TAIL_BYTES) -> str:
    """The end of a job's log ("" when there is none to read)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def last_exception(text: str) -> str | None:
    """The last line of the last Python exception in `text` (None: none)."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if EXCEPTION.match(line):
            return line
    return None


def classify(scheduler_state: str | None, error: str | None, log: str = "") -> str:
    """The failure's class: a scheduler state of SCHEDULER, a TEXT class found in the error or the log, the last
    line of the Python exception (the job's recorded error, else its log's), else the scheduler's state or 'failed'."""
    if scheduler_state in SCHEDULER:
        return scheduler_state
    for name, pattern in TEXT:
        if pattern.search(error or "") or pattern.search(log):
            return name
    if error:
        return error.strip().splitlines()[-1][:200]
    found = last_exception(log)
    if found:
        return found[:200]
    return scheduler_state or "failed"
