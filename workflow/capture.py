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
