"""A Snakemake job's resources -> submitit's SlurmExecutor parameters (which become #SBATCH lines).

The rules set these resources from the sweep's `resources.<stage>` block (StageResources.snakemake_resources),
so a user can also override them per rule with Snakemake's own `--set-resources rl:runtime=120`. Partition,
account and qos fall back to the profile's `rlsweep-slurm-*` settings when a stage names none.
"""

from __future__ import annotations

import shlex
from typing import Any, Mapping

# resource name -> submitit SlurmExecutor parameter (plain copies)
_DIRECT = {"nodes": "nodes", "cpus_per_task": "cpus_per_task", "qos": "qos", "constraint": "constraint",
           "slurm_partition": "partition", "slurm_account": "account"}


def parse_sbatch_extra(flags: str) -> dict[str, Any]:
    """'--reservation=abc --requeue' -> {'reservation': 'abc', 'requeue': True} (submitit writes each back as
    an #SBATCH line)."""
    out: dict[str, Any] = {}
    for flag in shlex.split(flags):
        if not flag.startswith("--"):
            raise ValueError(f"slurm_extra: {flag!r} is not a long option (--name=value)")
        name, eq, value = flag[2:].partition("=")
        out[name] = value if eq else True
    return out


def sbatch_parameters(resources: Mapping[str, Any], *, job_name: str, threads: int, partition: str | None = None,
                      account: str | None = None, qos: str | None = None, signal_delay_s: int = 120,
                      array_parallelism: int | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"job_name": job_name, "cpus_per_task": threads, "partition": partition,
                              "account": account, "qos": qos, "signal_delay_s": signal_delay_s,
                              "stderr_to_stdout": True,
                              "wckey": None}  # submitit's default wckey breaks clusters that enforce wckeys
    for res, param in _DIRECT.items():
        value = resources.get(res)
        if value not in (None, ""):
            params[param] = value
    if resources.get("runtime"):
        params["time"] = int(resources["runtime"])
        # the warning signal must leave the job most of its time: at most a fifth of the limit before the end
        params["signal_delay_s"] = max(10, min(signal_delay_s, params["time"] * 60 // 5))
    if resources.get("mem_mb"):
        params["mem"] = f"{int(resources['mem_mb'])}M"
    if resources.get("gpus_per_node"):
        params["gpus_per_node"] = int(resources["gpus_per_node"])
    if int(resources.get("nodes") or 1) > 1:
        # one process for the whole allocation, on its first node: the stage itself starts what runs on the other
        # nodes (a Ray cluster for verl, workflow/slurm/ray_cluster.py); srun would start it once per node
        params.update(use_srun=False, ntasks_per_node=1)
    if resources.get("exclusive"):
        params["exclusive"] = True
    extra = resources.get("slurm_extra")
    if extra:
        params["additional_parameters"] = parse_sbatch_extra(str(extra))
    if array_parallelism:
        params["array_parallelism"] = array_parallelism
    return {k: v for k, v in params.items() if v is not None or k == "wckey"}
