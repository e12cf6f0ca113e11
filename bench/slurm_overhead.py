#!/usr/bin/env python3
"""What does our SLURM path cost per job, next to bare `sbatch --wrap` and the community Snakemake SLURM plugin, on
the same cluster and in the same run?

All three run N independent trivial jobs whose payload records the time it started:
- bare: N x `sbatch --parsable --wrap 'date +%s.%N > start_i'`, then `squeue` once a second until all are gone;
- ours: a Snakefile of N rules with the same payload through `--executor rlsweep-slurm` (submitit, job arrays,
  one squeue call per status check of 1 s; a shell rule's job runs its command, no Snakemake inside the job);
- plugin: the same Snakefile through snakemake-executor-plugin-slurm (its defaults: `python -m snakemake` inside
  every job), installed with the same Snakemake version into the bench's own environment (--plugin-env, created on
  first use: it is not a dependency of rlsweep).
Per side and job count: the median submit -> payload-start latency (submit time from sacct, second resolution, the
same for all), the wall time for all N jobs / N, and the SLURM controller calls per job (sbatch, squeue, sacct,
scontrol, ...: every call through a logging shim on PATH, the jobs' own included), with the ratios ours / bare and
ours / plugin; with two job counts also the wall time each added job costs (the slope, without each side's fixed
start: a Snakemake start is ~2 s, which 8 jobs share far less than 32).
Goal (issue 27): ours <= the plugin on every figure and <= 1.5x bare per job.

    scripts/local_slurm.sh start     # or any cluster where you may submit
    python bench/slurm_overhead.py [--jobs 8 32] [--plugin-env .bench-env/slurm-plugin] [--no-plugin]
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import snakemake

REPO = Path(__file__).resolve().parent.parent
PLUGIN = "snakemake-executor-plugin-slurm==2.8.0"
SLURM_COMMANDS = ("sbatch", "squeue", "sacct", "scontrol", "scancel", "sinfo", "sacctmgr", "srun", "sstat")

SNAKEFILE = """
rule all:
    input: expand("start_{{i}}", i=range({n}))
rule job:
    output: "start_{{i}}"
    resources: runtime=5
    shell: "date +%s.%N > {{output}}"
"""


def shims(directory: Path, log: Path) -> dict[str, str]:
    """An environment whose SLURM commands append their name to `log`, then run the real one."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in SLURM_COMMANDS:
        real = shutil.which(name)
        if real:
            (directory / name).write_text(f'#!/bin/sh\necho {name} >> "{log}"\nexec {real} "$@"\n')
            (directory / name).chmod(0o755)
    return {**os.environ, "PATH": f"{directory}:{os.environ['PATH']}"}


def calls(log: Path) -> collections.Counter:
    return collections.Counter(log.read_text().split()) if log.exists() else collections.Counter()


def sacct_submit(job_ids: list[str]) -> dict[str, float]:
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "JobID,Submit", "-j", ",".join(job_ids)],
                         capture_output=True, text=True, check=True).stdout
    got = {}
    for line in out.splitlines():
        jid, submit = line.split("|")
        got[jid] = dt.datetime.fromisoformat(submit).timestamp()
    return got


def bare(n: int, work: Path, env: dict) -> tuple[float, list[float]]:
    t0 = time.time()
    ids = [subprocess.run(["sbatch", "--parsable", "-t", "5", "-o", "/dev/null", "--wrap",
                           f"date +%s.%N > {work}/start_{i}"], capture_output=True, text=True, env=env,
                          check=True).stdout.strip() for i in range(n)]
    while True:
        out = subprocess.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i"], capture_output=True, text=True,
                             env=env)
        if out.returncode == 0 and not out.stdout.strip():
            break
        time.sleep(1)
    wall = time.time() - t0
    submit = sacct_submit(ids)
    lat = [float((work / f"start_{i}").read_text()) - submit[j] for i, j in enumerate(ids)]
    return wall, lat


def snakemake_side(python: str, executor_args: list[str], n: int, work: Path, env: dict) -> tuple[float, list[float]]:
    (work / "Snakefile").write_text(SNAKEFILE.format(n=n))
    t0 = time.time()
    out = subprocess.run([python, "-m", "snakemake", *executor_args, "--jobs", str(n), "--latency-wait", "5",
                          "-d", str(work), "-s", str(work / "Snakefile")], capture_output=True, text=True, env=env,
                         cwd=work)  # (not the checkout: its snakemake_executor_plugin_rlsweep_slurm would be found)
    wall = time.time() - t0
    if out.returncode:
        sys.exit(f"snakemake ({' '.join(executor_args)}) failed:\n{out.stderr[-3000:]}")
    starts = sorted(float((work / f"start_{i}").read_text()) for i in range(n))
    # every job this side submitted, as sacct has them (the sides run one after another)
    fmt = "%Y-%m-%dT%H:%M:%S"
    listed = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "JobID,Submit", "-S",
                             dt.datetime.fromtimestamp(t0 - 1).strftime(fmt), "-E",
                             dt.datetime.fromtimestamp(time.time() + 1).strftime(fmt)],
                            capture_output=True, text=True, check=True).stdout
    submits = sorted(dt.datetime.fromisoformat(line.split("|")[1]).timestamp() for line in listed.splitlines()
                     if line and dt.datetime.fromisoformat(line.split("|")[1]).timestamp() >= int(t0))[:n]
    # array tasks and rules are not matched one to one: pair the sorted start times with the sorted submit times
    return wall, [s - t for s, t in zip(starts, submits)]


def plugin_python(env_dir: Path) -> str:
    """The bench environment's python with Snakemake (our version) and the community SLURM plugin."""
    python = env_dir / "bin" / "python"
    if not python.exists():
        print(f"creating {env_dir} with snakemake=={snakemake.__version__} and {PLUGIN} (once)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"snakemake=={snakemake.__version__}", PLUGIN],
                       check=True)
    return str(python)


def measure(n: int, sides: dict) -> dict:
    """Each side's (wall s, median submit -> start s, controller calls) for n jobs, one side after another."""
    results = {}
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        for i, (name, side) in enumerate(sides.items()):
            work = (Path(tmp) / f"side{i}").resolve()
            work.mkdir()
            log = work.parent / f"calls{i}.log"
            env = shims(work.parent / f"shims{i}", log)
            wall, lat = bare(n, work, env) if side is None else snakemake_side(side[0], side[1], n, work, env)
            results[name] = (wall, statistics.median(lat), calls(log))
    return results


def row(label: str, values: list[float], fmt: str) -> None:
    """One figure per side, then ours / bare and ours / plugin (sides in the order bare, ours, plugin)."""
    ours, base = values[1], values[0]
    line = f"{label:34s}" + "".join(format(v, fmt).rjust(15) for v in values) + f"{ours / max(base, 1e-9):11.2f}"
    if len(values) > 2:
        line += f"{ours / max(values[2], 1e-9):13.2f}"
    print(line)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, nargs="+", default=[8, 32],
                   help="job counts to run (two or more also give the wall time each added job costs)")
    p.add_argument("--plugin-env", type=Path, default=REPO / ".bench-env" / "slurm-plugin")
    p.add_argument("--no-plugin", action="store_true", help="only bare sbatch and ours")
    a = p.parse_args()
    sides = {"bare sbatch": None, "rlsweep-slurm": [sys.executable, ["--executor", "rlsweep-slurm",
                                                                     "--seconds-between-status-checks", "1"]]}
    if not a.no_plugin:
        sides["slurm plugin"] = [plugin_python(a.plugin_env.resolve()), ["--executor", "slurm"]]
    runs = {n: measure(n, sides) for n in a.jobs}
    nodes = subprocess.run(["sinfo", "-h", "-o", "%N"], capture_output=True, text=True).stdout.strip()
    names = list(sides)
    header = f"{'':34s}" + "".join(f"{n:>15s}" for n in names) + f"{'ours/bare':>11s}" + \
        (f"{'ours/plugin':>13s}" if "slurm plugin" in sides else "")
    for n, results in runs.items():
        print(f"\n{n} trivial jobs on {nodes}, one run")
        print(header)
        row("submit -> payload start (s)", [results[k][1] for k in names], ".2f")
        row("wall per job (s)", [results[k][0] / n for k in names], ".2f")
        row("controller calls per job", [sum(results[k][2].values()) / n for k in names], ".2f")
        for k in names:
            print(f"  {k}: " + ", ".join(f"{c} {v}" for c, v in sorted(results[k][2].items())))
    if len(runs) > 1:  # the slope: what one more job costs, without each tool's fixed start (Snakemake's ~2 s)
        small, big = min(runs), max(runs)
        print(f"\nfrom {small} to {big} jobs")
        print(header)
        row("wall per added job (s)", [(runs[big][k][0] - runs[small][k][0]) / (big - small) for k in names], ".2f")
    print("goal: ours <= the plugin on every row, <= 1.5x bare per job")


if __name__ == "__main__":
    main()
