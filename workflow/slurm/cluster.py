"""Talking to the SLURM controller: retried commands, batched job states, cluster limits.

Busy controllers answer "Socket timed out" or "Slurm temporarily unable to accept job" now and then; users of other
tools rerun whole workflows because one sbatch or squeue failed. Here a transient error is retried with backoff and
a status poll that still fails just reports "unknown" for this round (the caller keeps the jobs and asks again
later) instead of failing jobs that are fine.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from functools import lru_cache

# Error texts of a controller that is busy, restarting or briefly unreachable: retry, never fail a job for them.
_TRANSIENT = re.compile(
    r"socket timed out|temporarily unable|try again|unable to contact slurm controller|connection refused|"
    r"resource temporarily unavailable|slurm_receive_msg|communications connection failure|zero bytes were "
    r"transmitted|controller is busy|Transport endpoint is not connected|Unable to establish|Slurm backup controller",
    re.I)

# Jobs in these states are still on their way (a requeued job is PENDING again with the same id).
ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_FED", "RESIZING",
                    "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "POWER_UP_NODE"})
SUCCEEDED = "COMPLETED"


class SlurmError(RuntimeError):
    """A SLURM command failed; `transient` says whether asking again later may succeed."""

    def __init__(self, cmd: list[str], message: str, transient: bool):
        self.cmd, self.transient = cmd, transient
        super().__init__(f"`{' '.join(cmd[:2])} ...` failed: {message.strip()}")


def is_transient(message: str) -> bool:
    return bool(_TRANSIENT.search(message))


def retry_transient(attempt_once, *, retries: int = 4, backoff_s: float = 1.0, sleep=time.sleep, on_retry=None):
    """Call `attempt_once()` until it returns; a transient SlurmError is retried after backoff_s * 2^i seconds
    (`on_retry(error, delay)` hears of it), any other error and the last transient one propagate."""
    for attempt in range(retries + 1):
        try:
            return attempt_once()
        except SlurmError as e:
            if not e.transient or attempt == retries:
                raise
            delay = backoff_s * 2 ** attempt
            if on_retry is not None:
                on_retry(e, delay)
            sleep(delay)
    raise AssertionError("unreachable")


def run(cmd: list[str], *, retries: int = 4, backoff_s: float = 1.0, timeout_s: float = 60.0,
        sleep=time.sleep) -> str:
    """Run a SLURM command; retry transient failures (and timeouts) with exponential backoff."""
    def once() -> str:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise SlurmError(cmd, f"no answer in {timeout_s:.0f}s", transient=True) from None
        except FileNotFoundError:
            raise SlurmError(cmd, f"{cmd[0]} not found: is this a SLURM login node?", transient=False) from None
        if out.returncode == 0:
            return out.stdout
        message = out.stderr or out.stdout or f"exit code {out.returncode}"
        raise SlurmError(cmd, message, is_transient(message))
    return retry_transient(once, retries=retries, backoff_s=backoff_s, sleep=sleep)


@dataclass(frozen=True)
class JobState:
    state: str  # SLURM's state name, e.g. RUNNING, COMPLETED, TIMEOUT, NODE_FAIL
    exit_code: str | None = None  # "1:0" (code:signal), from sacct
    node: str | None = None
    reason: str | None = None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def succeeded(self) -> bool:
        return self.state == SUCCEEDED


def parse_squeue(text: str) -> dict[str, JobState]:
    """`squeue -h -r -o '%i|%T|%N|%r'`: one line per job or array task, ids like 123 or 123_4."""
    states = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0]:
            reason = parts[3] if len(parts) > 3 and parts[3] not in ("", "None") else None
            states[parts[0]] = JobState(parts[1], node=(parts[2] or None) if len(parts) > 2 else None,
                                        reason=reason)
    return states


def parse_sacct(text: str) -> dict[str, JobState]:
    """`sacct -X -n -P -o JobID,State,ExitCode,NodeList`: allocations only; 'CANCELLED by 0' -> CANCELLED."""
    states = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0] and "." not in parts[0]:
            states[parts[0]] = JobState(parts[1].split()[0] if parts[1] else "UNKNOWN",
                                        exit_code=parts[2] if len(parts) > 2 else None,
                                        node=parts[3] if len(parts) > 3 else None)
    return states


def job_states(job_ids: list[str], *, retries: int = 2) -> dict[str, JobState]:
    """The state of each job: one squeue call for all of them, then one sacct call for those squeue no longer
    lists (finished longer than MinJobAge ago). Ids neither knows are absent from the result. Raises SlurmError
    when the controller does not answer (after retries)."""
    if not job_ids:
        return {}
    wanted = set(job_ids)
    # all of this user's jobs in one call, array tasks one per line (-r); asking by id fails as a whole when one
    # id has been purged, so filter here instead
    states = {k: v for k, v in parse_squeue(run(["squeue", "-h", "-r", "--me", "-t", "all", "-o", "%i|%T|%N|%r"],
                                                retries=retries)).items() if k in wanted}
    missing = sorted(wanted - set(states))
    if missing:
        try:
            acct = parse_sacct(run(["sacct", "-X", "-n", "-P", "-o", "JobID,State,ExitCode,NodeList",
                                    "-j", ",".join(missing)], retries=retries))
            states.update({k: v for k, v in acct.items() if k in wanted})
        except SlurmError as e:
            if e.transient:
                raise
            # accounting disabled ("Slurm accounting storage is disabled"): the caller falls back to the result
            # files submitit writes at the end of each job
    return states


def parse_step_states(text: str) -> list[str]:
    """`sacct -n -P -o JobID,State -j ID`: the states of the job and its steps (`123`, `123.batch`, `123.0`)."""
    return [line.split("|")[1].split()[0] for line in text.splitlines() if line.count("|") >= 1 and line.split("|")[1]]


def ran_out_of_memory(job_id: str) -> bool:
    """Whether any step of a failed job ended OUT_OF_MEMORY. submitit runs the payload in a step (srun): when the
    cgroup's OOM killer ends it there, the batch script only sees a failed command and SLURM records the job
    FAILED (NonZeroExitCode); the step says why. False when sacct cannot say."""
    try:
        out = run(["sacct", "-n", "-P", "-o", "JobID,State", "-j", job_id], retries=1, timeout_s=20)
    except SlurmError:
        return False
    return "OUT_OF_MEMORY" in parse_step_states(out)


@dataclass(frozen=True)
class Usage:
    """What the scheduler accounted to one job: each of its attempts (a requeue starts another under the same id)
    as (state, elapsed seconds, allocated GPUs). A running attempt's elapsed time is its time so far."""

    attempts: tuple[tuple[str, int, int], ...]

    @property
    def elapsed_s(self) -> int:
        return sum(e for _, e, _ in self.attempts)

    @property
    def gpus(self) -> int:
        """The GPUs of its latest attempt."""
        return self.attempts[-1][2]

    @property
    def gpu_hours(self) -> float:
        return sum(e * g for _, e, g in self.attempts) / 3600


def tres_gpus(tres: str) -> int:
    """GPUs in an AllocTRES string (`cpu=2,gres/gpu=1,mem=1G`; typed `gres/gpu:a100=2` when the untyped count is
    absent)."""
    plain = re.search(r"(?:^|,)gres/gpu=(\d+)", tres)
    return int(plain[1]) if plain else sum(int(n) for n in re.findall(r"(?:^|,)gres/gpu:[^=,]+=(\d+)", tres))


def parse_usage(text: str) -> Usage | None:
    """`sacct -X -n -P -D -o JobID,State,ElapsedRaw,AllocTRES` for one job: one line per attempt, oldest first."""
    attempts = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 4 and parts[0] and parts[2].isdigit():
            attempts.append((parts[1].split()[0] if parts[1] else "UNKNOWN", int(parts[2]), tres_gpus(parts[3])))
    return Usage(tuple(attempts)) if attempts else None


def job_usage(job: str, wait_s: float = 0.0) -> Usage | None:
    """This job's accounting (`123` or an array task's `123_4`), None when sacct cannot say (accounting off, the
    controller away): a stage never fails for want of it. `wait_s`: how long to ask again while sacct answers but
    does not list the job yet (slurmctld sends a job's start to slurmdbd a moment after the job starts: a stage
    that runs for a second can end before its own record exists)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            usage = parse_usage(run(["sacct", "-X", "-n", "-P", "-D", "-j", job, "-o",
                                     "JobID,State,ElapsedRaw,AllocTRES"], retries=1, timeout_s=20))
        except SlurmError:
            return None
        if usage is not None or time.monotonic() >= deadline:
            return usage
        time.sleep(1.0)


@lru_cache(maxsize=1)
def max_array_size() -> int:
    """The cluster's MaxArraySize: array indices must be below it (SLURM's default is 1001)."""
    out = run(["scontrol", "show", "config"])
    m = re.search(r"^MaxArraySize\s*=\s*(\d+)", out, re.M)
    return int(m.group(1)) if m else 1001


def chunks(n: int, size: int) -> list[range]:
    """Split n array tasks into arrays of at most `size` tasks (indices 0..size-1 each)."""
    if size < 1:
        raise ValueError(f"array size must be >= 1, got {size}")
    return [range(i, min(i + size, n)) for i in range(0, n, size)]


def cancel(job_ids: list[str]) -> None:
    if job_ids:
        run(["scancel", *job_ids], retries=2)
