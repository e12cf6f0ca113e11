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


def runs_directly(job) -> bool:
    """Whether the job's command can run without Snakemake in the SLURM job: a single shell: rule job with nothing
    Snakemake must set up around the command in the job itself."""
    rule = job.rule
    return (not job.is_group() and job.is_shell
            and not any(getattr(rule, attr, None) for attr in ("conda_env", "container_img", "env_modules",
                                                               "benchmark"))
            and rule.shadow_depth is None
            and not any(is_flagged(f, flag) for f in job.output for flag in ("pipe", "service")))


def direct_command(job, envvar_declarations: str = "") -> str:
    """The job's formatted shell command, run from the workflow's directory (this process's: Snakemake works in
    it) under bash like Snakemake's `shell()`."""
    bash = shutil.which("bash") or "/bin/bash"
    parts = [f"cd {shlex.quote(os.getcwd())}", envvar_declarations.removesuffix("&&").strip(),
             f"exec {shlex.quote(bash)} -c {shlex.quote(BASH_PREFIX + job.shellcmd)}"]
    return " && ".join(p for p in parts if p)
