#!/usr/bin/env python3
"""How long does planning a big sweep take, next to bare Snakemake planning the same number of jobs?

Generates a sweep of N RL runs (default 10,000: 100 learning rates x 100 seeds, one shared SFT job), times
`snakemake -n` on it, then times `snakemake -n` on a trivial Snakefile with the same DAG shape and job count
(1 -> N -> N -> 1, `touch` rules, no Python in the rules). Prints both and the ratio (goal <= 1.5x).

    python bench/plan_dag.py [--runs 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

TRIVIAL = """
N = {n}
rule all:
    input: "agg.txt"
rule agg:
    input: expand("eval/{{i}}.txt", i=range(N))
    output: "agg.txt"
    shell: "touch {{output}}"
rule eval:
    input: "rl/{{i}}.txt"
    output: "eval/{{i}}.txt"
    shell: "touch {{output}}"
rule rl:
    input: "sft.txt"
    output: "rl/{{i}}.txt"
    shell: "touch {{output}}"
rule sft:
    output: "sft.txt"
    shell: "touch {{output}}"
"""


def dry_run(args: list[str], cwd: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--quiet", "rules", *args],
                         cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"snakemake failed:\n{res.stderr[-3000:]}")
    m = re.search(r"^total\s+(\d+)$", res.stdout + res.stderr, re.M)
    return elapsed, int(m.group(1)) if m else -1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    seeds = 100 if a.runs % 100 == 0 else 1
    lrs = [f"{(i + 1) * 1e-6:.6e}" for i in range(a.runs // seeds)]

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ours, bare = tmp / "ours", tmp / "bare"
        ours.mkdir(), bare.mkdir()
        (ours / "big.yaml").write_text(f"name: big\ngrid:\n  rl.lr: [{', '.join(lrs)}]\nseeds: {list(range(seeds))}\n")
        (bare / "Snakefile").write_text(TRIVIAL.format(n=a.runs))
        ours_args = ["-s", str(REPO / "Snakefile"), "-d", str(ours), "--config", f"sweep={ours / 'big.yaml'}"]

        t_ours, t_bare = [], []
        for _ in range(a.repeat):  # interleaved, so machine noise hits both alike
            t, jobs_ours = dry_run(ours_args, ours)
            t_ours.append(t)
            t, jobs_bare = dry_run(["-s", str(bare / "Snakefile")], bare)
            t_bare.append(t)

    mo, mb = statistics.median(t_ours), statistics.median(t_bare)
    print(f"runs in sweep:               {a.runs}")
    print(f"jobs planned (ours / bare):  {jobs_ours} / {jobs_bare}")
    print(f"rlsweep  snakemake -n:       {mo:7.2f} s  (median of {a.repeat}: {', '.join(f'{x:.2f}' for x in t_ours)})")
    print(f"bare     snakemake -n:       {mb:7.2f} s  (median of {a.repeat}: {', '.join(f'{x:.2f}' for x in t_bare)})")
    print(f"ratio:                       {mo / mb:7.2f} x  (goal <= 1.5)")


if __name__ == "__main__":
    main()
