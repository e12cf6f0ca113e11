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
    """A stage job's stderr, also appended to `log` for the rest of the process's life (and of the processes it
    starts, which inherit it): what `rlsweep watch` points at when the job fails. (A local job's stderr may be a file
    too, Snakemake's output redirected, but one that every job shares.) A `tee` process does the copying,
    not a thread of this one: it reads until the last writer is gone, so a traceback printed as the process dies
    still lands, and a SIGKILL loses nothing written before it. A SLURM job's stderr is submitit's log as well, in the
    executor's folder outside the results: the stage's own log is what travels with the results (copied, or mounted
    at another path), and the executor copies submitit's log beside it when the job ends (workflow/slurm/executor.py).
    Returns the log in use (None: none)."""
    import shutil
    import subprocess
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


# ------------------------------------------------------------------- logs kept under results/, without machine paths
# A log kept under results/ (a study trial's nested snakemake output, a SLURM job's submitit log copied beside its
# stage) names this machine's directories in full: the directory the sweep ran from, rlsweep's checkout (the
# Snakefile), the results directory. Copied or mounted at another path, such names point at nothing; each is written as
# what it is instead, relative: `<results>`, `.`, `<rlsweep>` (issue 80).
def path_names(results: str | Path, snakefile: str | Path, workdir: str | Path | None = None) -> list[tuple[str, str]]:
    """(absolute directory, what a kept log writes it as), the longest first."""
    names = {str(Path(snakefile).resolve().parent): "<rlsweep>", str(Path(workdir or Path.cwd()).resolve()): ".",
             str(Path(results).resolve()): "<results>"}  # (later wins: run from the checkout, it is `.`)
    return sorted(((p, n) for p, n in names.items() if p != "/"), key=lambda pn: -len(pn[0]))


def without_machine_paths(line: bytes, names: list[tuple[str, str]]) -> bytes:
    for path, name in names:
        line = line.replace(path.encode(), name.encode())
    return line


def relay(argv: list[str]) -> None:
    """Copy stdin to stdout line by line, each without machine paths (argv: path, name, path, name, ...): the
    process a study's nested snakemake writes its log through (workflow/study/driver.py)."""
    names = sorted(zip(argv[::2], argv[1::2]), key=lambda pn: -len(pn[0]))
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        out.write(without_machine_paths(line, names))
        out.flush()


def copy_without_machine_paths(source: Path, target: Path, names: list[tuple[str, str]]) -> None:
    """A log file copied to `target` (atomically), each line without machine paths."""
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    try:
        with open(source, "rb") as src, open(tmp, "wb") as dst:
            for line in src:
                dst.write(without_machine_paths(line, names))
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
