"""Where and from what code a stage ran: host, git sha + dirty flag, SLURM ids (null when not under SLURM), and what
SLURM accounted to it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from functools import lru_cache
from pathlib import Path

from workflow.slurm.cluster import job_usage
from workflow.slurm.retry import ATTEMPTS_ENV

_REPO = Path(__file__).resolve().parent.parent


@lru_cache(maxsize=1)
def git_state() -> tuple[str | None, bool | None]:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(_REPO), *args], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    try:
        sha = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
        return sha, dirty
    except (OSError, subprocess.SubprocessError):
        return None, None  # not a git checkout (an installed wheel) or no commits yet


def _int_env(name: str) -> int | None:
    v = os.environ.get(name)
    return int(v) if v and v.isdigit() else None


def slurm_restart_count() -> int:
    """How often SLURM has requeued this job (SLURM_RESTART_COUNT; SLURM sets it only from the first requeue on)."""
    return _int_env("SLURM_RESTART_COUNT") or 0


def slurm_job() -> tuple[str | None, int | None]:
    """(job id, array index) of the SLURM job this runs in: an array task's job id is its array's
    (SLURM_ARRAY_JOB_ID, as sacct and squeue group them), its index SLURM_ARRAY_TASK_ID; (None, None) off SLURM."""
    job = os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID")
    return job, _int_env("SLURM_ARRAY_TASK_ID") if os.environ.get("SLURM_ARRAY_JOB_ID") else None


def slurm_job_name() -> str | None:
    """The id squeue and scancel take for this very job: `123` or, for an array task, `123_4`."""
    job, index = slurm_job()
    return job if index is None else f"{job}_{index}"


def provenance() -> dict:
    sha, dirty = git_state()
    job, index = slurm_job()
    return {
        "host": socket.gethostname(),
        "git_sha": sha,
        "git_dirty": dirty,
        "slurm_job_id": job,
        "slurm_array_index": index,
        "slurm_node": os.environ.get("SLURMD_NODENAME"),
        "slurm_partition": os.environ.get("SLURM_JOB_PARTITION"),
        "requeue_count": slurm_restart_count() if os.environ.get("SLURM_JOB_ID") else None,
    }


def slurm_usage() -> dict:
    """What SLURM accounted to the job this runs in so far, as runs columns: elapsed seconds over all its attempts
    (a requeued job's earlier ones, and the earlier jobs a retry by failure reason replaced: RLSWEEP_SLURM_ATTEMPTS,
    workflow/slurm/retry.py), its allocated GPUs, GPU-hours (each attempt's elapsed x its GPUs), the number of
    attempts and the retried jobs with their reasons (JSON); empty off SLURM or without accounting (sacct)."""
    job = slurm_job_name()
    usage = job_usage(job, wait_s=15) if job else None
    if usage is None:
        return {}
    try:
        earlier = json.loads(os.environ.get(ATTEMPTS_ENV) or "[]")
    except ValueError:
        earlier = []
    before = [u for u in (job_usage(str(a.get("job"))) for a in earlier if a.get("job")) if u is not None]
    return {"slurm_elapsed_s": float(usage.elapsed_s + sum(u.elapsed_s for u in before)), "slurm_gpus": usage.gpus,
            "gpu_hours": usage.gpu_hours + sum(u.gpu_hours for u in before),
            "slurm_attempts": len(usage.attempts) + sum(len(u.attempts) for u in before),
            "slurm_retries": json.dumps(earlier) if earlier else None}
