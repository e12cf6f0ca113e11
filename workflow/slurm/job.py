"""What runs inside each SLURM job: the command of one rule job (its own shell command, or `python -m snakemake ...`
for rules that need Snakemake in the job: command.py), wrapped in a submitit `Checkpointable` so that preemption and
time limits requeue the job instead of losing it.

How a preemption or time limit plays out (SLURM sends submitit's signal, USR2 by default, `signal_delay_s`
before the end, or `scancel --signal=USR2` by hand):
1. SLURM signals every process of the job step. The command runs with that signal ignored, so Snakemake and the
   shells in between survive it; only our stage process (workflow/launch.py) handles it: it finishes the
   current training step, writes a checkpoint and exits.
2. submitit's handler in this process calls `checkpoint()`, which forwards the signal (in case it only reached
   us), waits for the stage to exit, and hands back this same callable: submitit then runs `scontrol requeue`.
3. The requeued job (same SLURM job id, SLURM_RESTART_COUNT + 1) runs the same command; the stage resumes from
   its newest checkpoint. A hard kill (node failure, `scontrol requeue`) loses at most the steps since the last
   periodic checkpoint.
A stage that stops on a failure it can resume from (a multi-node run that lost a node's Ray worker: exit status
EXIT_PREEMPTED without the signal, workflow/preemption.py) gets the same: this job requeues itself and the stage
resumes from its newest checkpoint on the new allocation.
The number of requeues of any kind is capped by `max_requeues`. A job with none left that gets the signal waits for
SLURM to end it, so SLURM records why (TIMEOUT at the time limit, which the executor's retry policy can resubmit with
a longer limit: retry.py; or PREEMPTED) instead of a failure of the wrapper's own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import submitit
from submitit.helpers import Checkpointable

from workflow.preemption import EXIT_PREEMPTED, PREEMPT_SIGNAL
from workflow.provenance import slurm_restart_count
from workflow.slurm import cluster


class RequeueLimitReached(RuntimeError):
    pass


class JobCommandFailed(RuntimeError):
    pass


def _ignore_preempt_signal() -> None:  # runs in the child between fork and exec
    signal.signal(PREEMPT_SIGNAL, signal.SIG_IGN)


def _exit_status(pid: int) -> str | None:
    """How the child ended, or None while it runs; it is not reaped. checkpoint() runs in submitit's signal handler
    on top of __call__'s Popen.wait(), which holds the Popen's wait lock: Popen.wait/poll there cannot see the exit
    (a wait with a timeout just runs out), so look with waitid(WNOWAIT) and leave the reaping to __call__."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # already reaped
        return "exited"
    if info is None:
        return None
    return f"exit code {info.si_status}" if info.si_code == os.CLD_EXITED else f"signal {info.si_status}"


class SnakemakeJob(Checkpointable):
    def __init__(self, command: str, max_requeues: int, grace_s: float = 60.0):
        self.command = command
        self.max_requeues = max_requeues
        self.grace_s = grace_s  # how long the stage may take to checkpoint after the signal
        self._child: subprocess.Popen | None = None

    def __call__(self) -> int:
        restarts = slurm_restart_count()
        if restarts > self.max_requeues:
            raise RequeueLimitReached(f"this job was requeued {restarts} times, more than max_requeues="
                                      f"{self.max_requeues}; its checkpoints are kept: run snakemake again to go on")
        if restarts:
            print(f"rlsweep: requeued run #{restarts} of this job; the stage resumes from its newest checkpoint",
                  file=sys.stderr, flush=True)
        print(f"rlsweep: running {self.command}", file=sys.stderr, flush=True)
        # own process group: the signal can be forwarded to the whole command without reaching this process
        self._child = subprocess.Popen(["/bin/sh", "-c", self.command], preexec_fn=_ignore_preempt_signal,
                                       start_new_session=True)
        rc = self._child.wait()
        if rc == EXIT_PREEMPTED and os.environ.get("SLURM_JOB_ID"):
            self._requeue_self(restarts)
        if rc != 0:
            raise JobCommandFailed(f"the job's command exited with code {rc} (its output is above in this log)")
        return rc

    def _requeue_self(self, restarts: int) -> None:
        """The stage stopped resumably on its own (its reason is above): requeue this job (same id, restart count
        + 1), as submitit does after a preemption signal; the process ends without a result file, so the job is
        pending again, not done."""
        if restarts >= self.max_requeues:
            raise RequeueLimitReached(f"the stage stopped resumably after {restarts} requeues (max_requeues="
                                      f"{self.max_requeues}); its checkpoints are kept: run snakemake again to go on")
        job = submitit.JobEnvironment().job_id  # an array task's own id (123_4)
        print(f"rlsweep: the stage stopped resumably; requeueing SLURM job {job}", file=sys.stderr, flush=True)
        cluster.run(["scontrol", "requeue", job], retries=2)  # a busy controller is retried
        sys.exit(-1)

    def checkpoint(self, *args, **kwargs):
        """Called by submitit's signal handler: let the stage save, then ask for a requeue (or refuse one)."""
        child = self._child
        if child is not None and _exit_status(child.pid) is None:
            try:
                os.killpg(child.pid, PREEMPT_SIGNAL)
            except ProcessLookupError:
                pass
            t0, status = time.monotonic(), None
            while status is None and time.monotonic() - t0 < self.grace_s:
                time.sleep(0.1)
                status = _exit_status(child.pid)
            if status is None:
                print(f"rlsweep: stage still running {self.grace_s:.0f}s after the signal; requeueing anyway (it "
                      "resumes from its last periodic checkpoint)", file=sys.stderr, flush=True)
            else:
                print(f"rlsweep: stage stopped {time.monotonic() - t0:.1f}s after the signal ({status})",
                      file=sys.stderr, flush=True)
        if slurm_restart_count() >= self.max_requeues:
            print(f"rlsweep: no requeue left ({slurm_restart_count()} of max_requeues={self.max_requeues}); the job "
                  "ends as SLURM ends it: TIMEOUT at its time limit (resources.<stage>.retry.timeout resubmits it with "
                  "more time, resuming from its checkpoint) or PREEMPTED", file=sys.stderr, flush=True)
            self._hold()
        return super().checkpoint(*args, **kwargs)

    def _hold(self) -> None:
        """Wait for SLURM to end this job, so that it records why (TIMEOUT, PREEMPTED) instead of a failure of ours:
        a TIMEOUT is what the executor's retry policy resubmits with a longer time limit (workflow/slurm/retry.py)."""
        while True:
            time.sleep(60)

    def __getstate__(self):  # the child process handle is never pickled into the requeued submission
        return {k: v for k, v in self.__dict__.items() if k != "_child"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._child = None
