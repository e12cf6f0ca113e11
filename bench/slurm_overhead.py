#!/usr/bin/env python3
"""What does our SLURM path cost per job, next to bare `sbatch --wrap`, on the same cluster?

Both sides run N independent trivial jobs whose payload records the time it started:
- bare: N x `sbatch --parsable --wrap 'date +%s.%N > start_i'`, then `squeue` once a second until all are gone;
- ours: a Snakefile of N rules with the same payload through `--executor rlsweep-slurm` (submitit, job arrays,
  one squeue call per second): every job also starts `python -m snakemake` inside SLURM, as every Snakemake
  cluster executor does.
Prints, per side, the median submit -> payload-start latency (submit time from sacct, second resolution, the
same for both) and the wall time for all N jobs / N, and the ratios ours / bare.

    scripts/local_slurm.sh start     # or any cluster where you may submit
    python bench/slurm_overhead.py [--jobs 8]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SNAKEFILE = """
rule all:
    input: expand("start_{{i}}", i=range({n}))
rule job:
    output: "start_{{i}}"
    resources: runtime=5
    shell: "date +%s.%N > {{output}}"
"""


def sacct_submit(job_ids: list[str]) -> dict[str, float]:
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "JobID,Submit", "-j", ",".join(job_ids)],
                         capture_output=True, text=True, check=True).stdout
    got = {}
    for line in out.splitlines():
        jid, submit = line.split("|")
        got[jid] = dt.datetime.fromisoformat(submit).timestamp()
    return got


def bare(n: int, work: Path) -> tuple[float, list[float]]:
    t0 = time.time()
    ids = [subprocess.run(["sbatch", "--parsable", "-t", "5", "-o", "/dev/null", "--wrap",
                           f"date +%s.%N > {work}/start_{i}"], capture_output=True, text=True,
                          check=True).stdout.strip() for i in range(n)]
    while True:
        out = subprocess.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i"], capture_output=True, text=True)
        if out.returncode == 0 and not out.stdout.strip():
            break
        time.sleep(1)
    wall = time.time() - t0
    submit = sacct_submit(ids)
    lat = [float((work / f"start_{i}").read_text()) - submit[j] for i, j in enumerate(ids)]
    return wall, lat


def ours(n: int, work: Path) -> tuple[float, list[float]]:
    (work / "Snakefile").write_text(SNAKEFILE.format(n=n))
    t0 = time.time()
    out = subprocess.run([sys.executable, "-m", "snakemake", "--executor", "rlsweep-slurm", "--jobs", str(n),
                          "--seconds-between-status-checks", "1", "--latency-wait", "5", "-d", str(work),
                          "-s", str(work / "Snakefile")], capture_output=True, text=True)
    wall = time.time() - t0
    if out.returncode:
        sys.exit(f"snakemake failed:\n{out.stderr[-3000:]}")
    ids = [line.split("as SLURM job ")[1].split(";")[0] for line in out.stderr.splitlines() if "as SLURM job" in line]
    submit = sacct_submit(ids)
    starts = sorted(float((work / f"start_{i}").read_text()) for i in range(n))
    # array tasks and rules are not matched one to one: pair the sorted start times with the sorted submit times
    lat = [s - t for s, t in zip(starts, sorted(submit[j] for j in ids))]
    return wall, lat


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=8)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(dir=".") as d1, tempfile.TemporaryDirectory(dir=".") as d2:
        b_wall, b_lat = bare(a.jobs, Path(d1).resolve())
        o_wall, o_lat = ours(a.jobs, Path(d2).resolve())
    b_med, o_med = statistics.median(b_lat), statistics.median(o_lat)
    nodes = subprocess.run(["sinfo", "-h", "-o", "%N"], capture_output=True, text=True).stdout.strip()
    print(f"{a.jobs} trivial jobs on {nodes}")
    print(f"{'':28s}{'bare sbatch':>14s}{'rlsweep-slurm':>16s}{'ratio':>8s}")
    print(f"{'submit -> payload start (s)':28s}{b_med:14.2f}{o_med:16.2f}{o_med / max(b_med, 1e-9):8.2f}")
    print(f"{'wall per job (s)':28s}{b_wall / a.jobs:14.2f}{o_wall / a.jobs:16.2f}{o_wall / b_wall:8.2f}")
    print(f"{'wall, all jobs (s)':28s}{b_wall:14.1f}{o_wall:16.1f}")


if __name__ == "__main__":
    main()
