"""Where a sweep's jobs run and how many at once: what `snakemake` was started with, recorded when the sweep starts
(results/<sweep>/executor.json, rewritten at each start: the latest is what the jobs now run under).

    {"kind": "local", "slots": 2, "gpus": 0, "gpu_kind": null, "recorded_at": "2026-12-02T22:41:07+00:00"}
    {"kind": "slurm", "slots": 100, "gpus": null, ...}   # slots: the profile's `jobs:` (SLURM jobs in flight)

Local slots are cores: a job takes its stage's `threads` of them (Snakemake runs jobs side by side while their
threads fit), so a local sweep's parallelism is cores over threads. On SLURM a slot is a job. Two questions read it:
how many GPUs a job will use (a local job on a machine without GPUs uses none, whatever its `resources:` ask of
SLURM), and the sweep's ETA (workflow/watch/eta.py). Before a sweep's first start it is guessed, and said so:
SLURM where this machine has its commands (sbatch), else this machine.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from workflow.atomic import write_json
from workflow.layout import sweep_dir
from workflow.devices import visible_gpus

EXECUTOR_FILE = "executor.json"
NESTED_ENV = "RLSWEEP_NESTED"  # set in a study's or design's nested snakemake: the outer start's record stands
SLURM_EXECUTORS = ("rlsweep-slurm", "slurm", "cluster-generic")


@dataclass(frozen=True)
class Executor:
    kind: str  # "local" | "slurm"
    slots: int  # local: cores; SLURM: jobs in flight at once
    gpus: int | None  # local: the GPUs this machine gives a job (0: none); SLURM: as each job asks (None)
    gpu_kind: str | None = None
    recorded_at: str | None = None  # None: guessed, the sweep has not started under this version

    @property
    def local(self) -> bool:
        return self.kind == "local"

    def text(self) -> str:
        where = (f"this machine ({self.slots} cores, " + (f"{self.gpus} x {self.gpu_kind or 'GPU'})" if self.gpus
                                                          else "no GPU)")
                 if self.local else f"SLURM ({self.slots} jobs at once)")
        return where + ("" if self.recorded_at else ": a guess, the sweep has not started")

    def slots_of(self, threads: int) -> int:
        """The slots one job of `threads` threads takes (at most all of them: Snakemake scales a job down to fit)."""
        return max(1, min(threads, self.slots)) if self.local else 1


def record_executor(root: str | Path, sweep: str, executor_name: str | None, cores: int | None,
                    jobs: int | None) -> Executor | None:
    """At a sweep's start (the Snakefile's onstart): the executor Snakemake runs the jobs with and its parallelism.
    None in a nested start (a study's trial, a design's round): the outer start's record stands."""
    if os.environ.get(NESTED_ENV):
        return None
    slurm = (executor_name or "local") in SLURM_EXECUTORS
    n, kind = (None, None) if slurm else visible_gpus()
    found = Executor("slurm" if slurm else "local", int((jobs if slurm else cores) or os.cpu_count() or 1), n, kind,
                     dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    write_json(sweep_dir(root, sweep) / EXECUTOR_FILE, found.__dict__)
    return found


def executor_of(root: str | Path, sweep: str, on: str | None = None) -> Executor:
    """The executor the sweep last started under; else (or with `on`: "local" | "slurm", a user's say) a guess."""
    if on is None:
        try:
            found = json.loads((sweep_dir(root, sweep) / EXECUTOR_FILE).read_text())
            return Executor(**{k: found.get(k) for k in ("kind", "slots", "gpus", "gpu_kind", "recorded_at")})
        except (OSError, ValueError, TypeError):
            pass
    slurm = on == "slurm" or (on is None and shutil.which("sbatch") is not None)
    if slurm:
        return Executor("slurm", 100, None)  # (profiles/slurm: jobs: 100)
    n, kind = visible_gpus()
    return Executor("local", os.cpu_count() or 1, n, kind)


def gpus_used(asked: int, executor: Executor) -> int:
    """The GPUs a job that asks `asked` of SLURM uses: all of them on SLURM; here, those this machine has (a job
    runs on the GPUs it sees: on a CPU machine, none)."""
    return asked if not executor.local else min(asked, executor.gpus or 0)
