#!/usr/bin/env python3
"""How long does planning a big sweep take, next to bare Snakemake planning the same number of jobs?

Generates a sweep of N RL runs (default 10,000: 100 learning rates x 100 seeds, one shared SFT job) evaluated at
steps 0, 20, 40 and 60 (step 0 evaluated once and copied to the other runs: eval.at_start), times `snakemake -n` on
it, then times `snakemake -n` on a trivial Snakefile with the same DAG shape and job count (sft -> N chains of 3 RL
segment jobs -> 3N eval, each after its segment; sft -> eval at step 0 -> N - 1 copies, all -> aggregate -> report;
`touch` rules, one input function: the segment before). Prints
both and the ratio (goal, issue 27: <= 1.1x). Our Snakefile tunes Python's garbage collector for big DAGs and caches
a signature Snakemake inspects per resource of every job (workflow/big_dag.py); a third timing gives bare Snakemake
the same tuning, so the print shows what the tuning is worth alone and what our rules cost beyond it (goal, issue
64: <= 1.05x). Our runs use a cache folder of their own (RLSWEEP_CHECK_CACHE): the first plans the sweep cold (its
expansion not kept yet: workflow/sweep/expansion_cache.py), timed apart; the repeats read it again, as every later
`snakemake -n`, run, `rlsweep plan` or `status` of an unchanged sweep does.

    python bench/plan_dag.py [--runs 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

STEPS = (20, 40, 60)
SWEEP = """name: big
base:
  rl: {{steps: 60, checkpoint_every: 20}}
  eval: {{every: 20, at_start: true}}
grid:
  rl.lr: [{lrs}]
seeds: {seeds}
"""
TRIVIAL = """
N = {n}
STEPS = {steps}
rule all:
    input: "report.txt"
rule report:
    input: "agg.txt"
    output: "report.txt"
    shell: "touch {{output}}"
rule agg:
    input: expand("eval/{{i}}/{{s}}.txt", i=range(N), s=[0, *STEPS])
    output: "agg.txt"
    shell: "touch {{output}}"
rule eval_copy:
    input: "eval/0/0.txt"
    output: "eval/{{i}}/0.txt"
    wildcard_constraints: i="[1-9][0-9]*"
    shell: "touch {{output}}"
rule eval0:
    input: "sft.txt"
    output: "eval/0/0.txt"
    shell: "touch {{output}}"
rule eval:
    input: "rl/{{i}}/{{s}}.txt"
    output: "eval/{{i}}/{{s}}.txt"
    wildcard_constraints: s="[1-9][0-9]*"
    shell: "touch {{output}}"
rule rl_first:
    input: "sft.txt"
    output: "rl/{{i}}/{first}.txt"
    shell: "touch {{output}}"
rule rl_next:
    input: lambda wc: f"rl/{{wc.i}}/{{int(wc.s) - {every}}}.txt"
    output: "rl/{{i}}/{{s}}.txt"
    wildcard_constraints: s="{later}"
    shell: "touch {{output}}"
rule sft:
    output: "sft.txt"
    shell: "touch {{output}}"
"""
# what our Snakefile does to plan big DAGs faster (workflow/big_dag.py), given to bare Snakemake too
TUNING = "from workflow.big_dag import cache_resource_signature, tune_gc\ncache_resource_signature()\ntune_gc()\n"


def bare_snakefile(runs: int) -> str:
    """The sweep's DAG as `touch` rules: each RL run a chain of segment jobs ending at the evaluated steps (its first
    from the SFT job, each next from the one before), each evaluation after its segment."""
    every = STEPS[1] - STEPS[0]
    return TRIVIAL.format(n=runs, steps=list(STEPS), first=STEPS[0], every=every,
                          later="|".join(str(s) for s in STEPS[1:]))


def dry_run(args: list[str], cwd: Path, env: dict | None = None) -> tuple[float, int]:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--quiet", "rules", *args],
                         cwd=cwd, capture_output=True, text=True, env=env)
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
        ours, bare, bare_gc = tmp / "ours", tmp / "bare", tmp / "bare_gc"
        ours.mkdir(), bare.mkdir(), bare_gc.mkdir()
        (ours / "big.yaml").write_text(SWEEP.format(lrs=", ".join(lrs), seeds=list(range(seeds))))
        (bare / "Snakefile").write_text(bare_snakefile(a.runs))
        (bare_gc / "Snakefile").write_text(bare_snakefile(a.runs) + TUNING)
        ours_args = ["-s", str(REPO / "Snakefile"), "-d", str(ours), "--config", f"sweep={ours / 'big.yaml'}"]
        ours_env = {**os.environ, "RLSWEEP_CHECK_CACHE": str(tmp / "cache")}  # empty: the first run is cold

        t_cold, _ = dry_run(ours_args, ours, ours_env)
        t_ours, t_bare, t_gc = [], [], []
        for _ in range(a.repeat):  # interleaved, so machine noise hits all alike
            t, jobs_ours = dry_run(ours_args, ours, ours_env)
            t_ours.append(t)
            t, jobs_bare = dry_run(["-s", str(bare / "Snakefile")], bare)
            t_bare.append(t)
            t, _ = dry_run(["-s", str(bare_gc / "Snakefile")], bare_gc)
            t_gc.append(t)

    mo, mb, mg = statistics.median(t_ours), statistics.median(t_bare), statistics.median(t_gc)
    print(f"runs in sweep:               {a.runs}")
    print(f"jobs planned (ours / bare):  {jobs_ours} / {jobs_bare}")
    print(f"rlsweep  snakemake -n, cold: {t_cold:7.2f} s  (the sweep's first plan on this machine)")
    print(f"rlsweep  snakemake -n:       {mo:7.2f} s  (median of {a.repeat}: {', '.join(f'{x:.2f}' for x in t_ours)})")
    print(f"bare     snakemake -n:       {mb:7.2f} s  (median of {a.repeat}: {', '.join(f'{x:.2f}' for x in t_bare)})")
    print(f"bare + our tuning:           {mg:7.2f} s  (median of {a.repeat}: {', '.join(f'{x:.2f}' for x in t_gc)})")
    print(f"ratio:                       {mo / mb:7.2f} x  (goal <= 1.1); against bare with the same tuning: "
          f"{mo / mg:.2f} x (goal <= 1.05); cold against bare with the same tuning: {t_cold / mg:.2f} x")


if __name__ == "__main__":
    main()
