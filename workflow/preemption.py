"""Stop a training stage cleanly when the cluster asks: checkpoint at the next step boundary, then exit.

SLURM (through submitit's `--signal`) sends USR2 before a job's time limit and on preemption; submitit lets us
pick another signal with SUBMITIT_PREEMPT_SIGNAL (NCCL is known to swallow USR1). The handler only sets a flag:
the training loop finishes the step it is in, saves a checkpoint and raises `Preempted`, so the requeued job
resumes exactly where this one stopped. The same works locally: `kill -USR2 <pid>` checkpoints and stops a run.
"""

from __future__ import annotations

import os
import signal

PREEMPT_SIGNAL = getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"))
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: stopped on request, resumable

_requested = False


class Resumable(RuntimeError):
    """A failure that a fresh start of the same job resumes from its newest checkpoint (a multi-node run that lost
    a node's worker): the stage exits EXIT_PREEMPTED and, on SLURM, its job requeues itself (slurm/job.py)."""


class Preempted(Exception):
    """Raised by a training loop after it checkpointed because the stop signal arrived."""

    def __init__(self, step: int):
        self.step = step
        super().__init__(f"stopped by signal {PREEMPT_SIGNAL.name} after checkpointing step {step}")


def _on_signal(signum, frame) -> None:
    global _requested
    _requested = True


def install() -> None:
    """Handle the stop signal in this process (also when the parent started us with it ignored)."""
    signal.signal(PREEMPT_SIGNAL, _on_signal)


def requested() -> bool:
    return _requested
