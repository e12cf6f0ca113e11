#!/usr/bin/env python3
"""Does `rlsweep plan` estimate a sweep it has never seen from the jobs it has? (issue 63, item 4)

Runs the demo (sweeps/demo.yaml) into a fresh store, then two variants of it that the store has not run:
  longer   the demo at rl.steps 120 (its runs extend the demo's finished 80-step runs: steps 81-120 and the new
           evaluations are the work left)
  k5       the demo with SFPO at K 5 (6 backward passes a step while active, against the demo's measured K 3)
For each variant it prints the plan's estimate of the hours left (made from the demo's measurements, before the
variant runs: `workflow.sweep.plan.plan`) against the hours its jobs then took (the wall-clock of the variant's own
stage jobs in the runs table: `workflow.sweep.plan.used`), per stage and in all, and how each estimate was made
(measured from the same shape, scaled from another K, or a time limit). Goal: every variant's total within 30 %.
Both are job hours (the sum over jobs, as the plan's are), not the sweep's elapsed time; run on a quiet machine.

    python bench/plan_estimate.py [--results DIR] [--keep]     # ~15 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import copy
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workflow.results.catalog import Catalog  # noqa: E402
from workflow.sweep.expand import load_sweep  # noqa: E402
from workflow.sweep.plan import plan, used  # noqa: E402

GOAL = 0.30


def variants(demo: dict) -> dict[str, dict]:
    longer = copy.deepcopy(demo)
    longer["name"], longer["base"]["rl"]["steps"] = "demo_longer", 120
    k5 = copy.deepcopy(demo)
    k5["name"], k5["base"]["rl"]["sfpo"]["K"] = "demo_k5", 5
    return {"longer": longer, "k5": k5}


def run(sweep: Path, results: Path) -> float:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores", "2",
                          "--config", f"sweep={sweep}", f"results={results}"], cwd=REPO, capture_output=True,
                         text=True)
    if out.returncode:
        sys.exit(f"{sweep.name} failed:\n{out.stderr[-3000:]}")
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, help="the store (default: a new temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary store")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="plan_estimate_"))
    results = a.results or tmp / "results"
    demo = yaml.safe_load((REPO / "sweeps" / "demo.yaml").read_text())
    print(f"demo: {run(REPO / 'sweeps' / 'demo.yaml', results):.0f} s into {results}", flush=True)
    worst, lines = 0.0, []
    for label, spec in variants(demo).items():
        path = tmp / f"{spec['name']}.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        sweep = load_sweep(path)
        estimate = {p.stage: p for p in plan(sweep, results)}
        elapsed = run(path, results)
        spent = {u.stage: u for u in used(sweep, Catalog(results)) if u.method is None}
        print(f"\n{label} ({spec['name']}: {elapsed:.0f} s elapsed)")
        print(f"  {'stage':6} {'jobs':>4} {'estimate s':>10} {'measured s':>10} {'ratio':>6}  estimated from")
        est_total = used_total = 0.0
        for stage in sorted(set(estimate) | set(spent), key=["data", "pretrain", "sft", "rl", "eval"].index):
            p, u = estimate.get(stage), spent.get(stage)
            est, got = (p.hours * 3600 if p else 0.0), (u.hours * 3600 if u else 0.0)
            if not (est or got):
                continue
            est_total, used_total = est_total + est, used_total + got
            how = (f"{p.measured} measured, {p.bounded} time limits" if p else "-")
            print(f"  {stage:6} {u.jobs if u else 0:>4} {est:>10.1f} {got:>10.1f} {est / got if got else float('nan'):>6.2f}"
                  f"  {how}")
        ratio = est_total / used_total if used_total else float("nan")
        worst = max(worst, abs(ratio - 1))
        print(f"  {'all':6} {'':>4} {est_total:>10.1f} {used_total:>10.1f} {ratio:>6.2f}")
        lines.append(f"{label}: estimate / measured = {ratio:.2f}")
    print("\n" + "; ".join(lines))
    print(f"goal: every variant within {GOAL:.0%}: {'met' if worst <= GOAL else 'NOT met'} (worst {worst:.0%})")
    if not a.keep and a.results is None:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if worst <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
