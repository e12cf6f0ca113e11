"""A nested `snakemake`: what the study's and the design's drivers start for each trial or round, over the same
Snakefile and sweep with explicit targets, through the outer invocation's executor and profile (SLURM included), its
output written to a log under results/ through a relay that writes this machine's paths relative."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from workflow.capture import path_names
from workflow.sweep.executor import NESTED_ENV

# options of the outer `snakemake` that decide where and how jobs run; every nested trial run gets them too
_PASSED = {"--profile": True, "--workflow-profile": True, "--executor": True, "-e": True, "--jobs": True,
           "-j": True, "--latency-wait": True, "--seconds-between-status-checks": True, "--keep-going": False,
           "-k": False, "--rerun-incomplete": False}


# the process a trial's log is written through (workflow/capture.py relay): the log lies under results/, and what
# snakemake prints of this machine's directories it writes relative
RELAY = "import sys; from workflow.capture import relay; relay(sys.argv[1:])"


def nested_snakemake_args(argv: list[str]) -> str:
    """The outer invocation's executor / profile / jobs options (shell-quoted) for the nested trial runs."""
    out, i = [], 1
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if name in _PASSED:
            out.append(argv[i])
            if _PASSED[name] and not eq and i + 1 < len(argv):
                out.append(argv[i + 1])
                i += 1
        i += 1
    return " ".join(shlex.quote(a) for a in out)


def start_nested(snakefile: str, cores: int, snakemake_args: list[str], sweep_file: str, results: str,
                 targets: list[str], log: Path) -> tuple[subprocess.Popen, subprocess.Popen]:
    """Start `snakemake` for `targets`, its output appended to `log`; returns (snakemake, the relay writing its log:
    wait for it before pointing anyone at the log)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "snakemake", "-s", snakefile, "--nolock", "--cores", str(cores), *snakemake_args,
            "--config", f"sweep={sweep_file}", f"results={results}", "--", *targets]
    env = {**os.environ, NESTED_ENV: "1"}  # (the outer start recorded the executor: workflow/sweep/executor.py)
    with open(log, "ab") as f:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        # the log is under results/: what it prints of this machine's paths is written relative (RELAY)
        relay = subprocess.Popen([sys.executable, "-c", RELAY, *(x for pair in path_names(results, snakefile)
                                                                   for x in pair)], stdin=proc.stdout, stdout=f)
    proc.stdout.close()  # (the relay's now: it ends when snakemake does)
    return proc, relay
