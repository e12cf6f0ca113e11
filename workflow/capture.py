"""Where a block's output goes: a library run inside a stage job (verl's checkpoint merger, vLLM starting its engine)
prints warnings, bars and C-level messages that belong in the job's log file, not on the terminal Snakemake reports
on (several jobs share it)."""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def output_to(log: Path, what: str) -> Iterator[None]:
    """This process's own output, appended to `log` for the block and then put back: file descriptors 1 and 2, so
    Python's prints, tqdm bars, loggers holding the old sys.stderr and C-level writes alike. What a library prints
    meanwhile (verl's merger: device-mesh warnings, shard bars) goes to the job's log, not to the terminal. `what`
    heads the block in the log ("---- ...", unlike an attempt's "==== " header of run_supervised)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        with open(log, "ab") as f:
            f.write(f"---- {time.strftime('%Y-%m-%d %H:%M:%S')} {what}\n".encode())
            f.flush()
            os.dup2(f.fileno(), 1)
            os.dup2(f.fileno(), 2)
            try:
                yield
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        os.close(saved[0])
        os.close(saved[1])


JOB_LOG_ENV = "RLSWEEP_JOB_LOG"  # the job's log file, for what the job starts (verl's processes) and its live file


def keep_log(log: Path) -> Path | None:
    """A local stage job's stderr, also appended to `log` for the rest of the process's life (and of the processes
    it starts, which inherit it): what `rlsweep watch` points at when the job fails. A SLURM job's stderr is already
    a file of its own (submitit's log): that file is the log, and nothing is added. (A local job's stderr may be a
    file too, Snakemake's output redirected, but one that every job shares.) A `tee` process does the copying,
    not a thread of this one: it reads until the last writer is gone, so a traceback printed as the process dies
    still lands, and a SIGKILL loses nothing written before it. Returns the log in use (None: none)."""
    import shutil
    import stat
    import subprocess
    if os.environ.get("SLURM_JOB_ID") and stat.S_ISREG(os.fstat(2).st_mode):
        found = os.readlink("/proc/self/fd/2")
        os.environ[JOB_LOG_ENV] = found
        return Path(found)
    tee = shutil.which("tee")
    if tee is None:
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        f.write(f"==== {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}\n".encode())
    sys.stderr.flush()
    # its own session: Ctrl-C at the terminal stops the job, and tee still takes down what the job prints as it stops
    proc = subprocess.Popen([tee, "-a", str(log)], stdin=subprocess.PIPE, stdout=os.dup(2), start_new_session=True)
    os.dup2(proc.stdin.fileno(), 2)
    proc.stdin.close()  # fd 2 is now the only write end this process holds
    os.environ[JOB_LOG_ENV] = str(log)
    return log
