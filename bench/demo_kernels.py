#!/usr/bin/env python3
"""Does the demo's RL gain hold whatever float kernels the machine has? Runs a sweep (the demo by default) once per
CPU kernel choice, each in its own results directory (a kernel choice is not part of a run's identity: one store
would reuse the first choice's jobs), and prints per setting the start, each seed's final and the pooled paired
final − start with its 95% interval (workflow/report/gain.py: the report's gain table).

    python bench/demo_kernels.py [--sweep sweeps/demo.yaml] [--kernels native,default,avx2,avx512,mkl-compatible]
                                 [--results /tmp/demo_kernels] [--cores 2]

PyTorch picks its CPU kernels by instruction set (ATEN_CPU_CAPABILITY forces one) and MKL takes different code paths
on Intel and AMD processors (MKL_CBWR forces one): several "machines" on one. A choice the processor cannot run
(avx512 without AVX-512) is skipped and said so. Exit status 1 when any gain does not hold under any choice.
Results already there are reused (Snakemake reruns nothing): pass a fresh --results to measure again.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workflow.kernels import KERNELS, unavailable  # noqa: E402
from workflow.report.gain import gains  # noqa: E402
from workflow.sweep.expand import load_sweep  # noqa: E402


def run(sweep_file: Path, results: Path, kernel: str, cores: int) -> float:
    env = {**os.environ, **KERNELS[kernel]}
    log = results / "snakemake.log"
    results.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with log.open("ab") as out:
        code = subprocess.run([sys.executable, "-m", "snakemake", "--cores", str(cores), "--config",
                               f"sweep={sweep_file}", f"results={results}"], cwd=REPO, env=env, stdout=out,
                              stderr=subprocess.STDOUT).returncode
    if code:
        raise SystemExit(f"{kernel}: snakemake failed (exit {code}); see {log}")
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", type=Path, default=REPO / "sweeps" / "demo.yaml")
    ap.add_argument("--kernels", default="native,default,avx2,avx512,mkl-compatible")
    ap.add_argument("--results", type=Path, default=Path("/tmp/demo_kernels"))
    ap.add_argument("--cores", type=int, default=2)
    args = ap.parse_args()
    chosen = args.kernels.split(",")
    unknown = [k for k in chosen if k not in KERNELS]
    if unknown:
        ap.error(f"--kernels: unknown {unknown}; choose from {', '.join(KERNELS)}")
    sweep = load_sweep(args.sweep)
    failures = 0
    print(f"{sweep.name}: start -> final per seed, final - start pooled [95% interval]")
    for kernel in chosen:
        why = unavailable(kernel)
        if why:
            print(f"{kernel:15s} skipped: {why}")
            continue
        root = args.results / kernel
        wall = run(args.sweep.resolve(), root, kernel, args.cores)
        for g in gains(sweep, root):
            bad = g.shortfalls()
            failures += bool(bad)
            start = "?" if g.start is None else f"{g.start:.3f}"
            diff = g.diff_text() or "?"
            print(f"{kernel:15s} {g.label:10s} {g.benchmark:12s} {start} -> {g.finals_text():24s} {diff}"
                  f"  {'holds' if not bad else 'FAILS: ' + '; '.join(bad)}")
        print(f"{kernel:15s} ({wall:.0f} s wall, {root})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
