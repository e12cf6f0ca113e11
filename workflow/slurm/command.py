"""The command a SLURM job runs for one Snakemake rule job.

Every Snakemake cluster executor (ours before, the community SLURM plugin) runs `python -m snakemake --mode remote`
inside each job: that second Snakemake parses the Snakefile, expands the whole sweep and builds the DAG again, only
to run one shell command. That is 2-3 s of CPU per job on an idle node and far more when many start at once on a
small one (bench/slurm_overhead.py), which made it most of our per-job cost.

A rule that is nothing but a `shell:` command needs none of it when the file system is shared: the main Snakemake
prepares the job here (removes stale outputs, creates their directories, waits for the inputs; what Snakemake's
own local executor does) and checks, touches and logs the outputs when the job ends, so the job only has to run
the formatted command, the way Snakemake's `shell()` runs it (bash, `set -euo pipefail`). Anything that needs
Snakemake inside the job (run:/script:/wrapper: rules, conda, containers, environment modules, shadow
directories, benchmarks, pipes, groups) keeps the `python -m snakemake` command.
"""

from __future__ import annotations

import os
import shlex
import shutil

from snakemake.io import is_flagged

# Snakemake's default prefix of every shell command when bash is the shell (snakemake/shell.py)
BASH_PREFIX = "set -euo pipefail; "


def why_not_direct(job) -> str | None:
    """None when the job's command can run without Snakemake in the SLURM job, else the reason it cannot."""
    if job.is_group():
        return "a job group"
    rule = job.rule
    if not job.is_shell:
        return "not a shell: rule"
    for attr, what in (("conda_env", "a conda environment"), ("container_img", "a container"),
                       ("env_modules", "environment modules"), ("benchmark", "a benchmark")):
        if getattr(rule, attr, None):
            return what
    if rule.shadow_depth is not None:
        return "a shadow directory"
    if any(is_flagged(f, flag) for f in job.output for flag in ("pipe", "service")):
        return "a pipe or service output"
    return None


def direct_command(job, envvar_declarations: str = "", workdir: str | None = None) -> str:
    """The job's formatted shell command, run from the workflow's directory under bash like Snakemake's `shell()`."""
    bash = shutil.which("bash") or "/bin/bash"
    parts = [f"cd {shlex.quote(workdir or os.getcwd())}", envvar_declarations.removesuffix("&&").strip(),
             f"exec {shlex.quote(bash)} -c {shlex.quote(BASH_PREFIX + job.shellcmd)}"]
    return " && ".join(p for p in parts if p)
