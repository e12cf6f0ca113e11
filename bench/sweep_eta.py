#!/usr/bin/env python3
"""How good is the sweep's ETA (`rlsweep watch`'s header, workflow/watch/eta.py)? Runs a sweep (the demo by default)
into a fresh results root with `snakemake`, takes a Watcher snapshot every --every seconds beside it, and when it
has ended compares the finish time each snapshot predicted with the real end.

Printed: the real duration; the ETA shown at 25% (and 10%, 50%, 75%) of it, as the predicted end against the real one
(predicted / real duration from that moment, and the error in seconds); each snapshot's basis (measured, at most,
no basis for N jobs). There is no goal (issue 82): the figure is reported.

    python bench/sweep_eta.py [--sweep sweeps/demo.yaml] [--every 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from workflow.sweep.expand import load_sweep  # noqa: E402
from workflow.watch.snapshot import Watcher  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", default="sweeps/demo.yaml")
    ap.add_argument("--every", type=float, default=5.0)
    ap.add_argument("--results", default=None, help="results root (default: a fresh temporary directory)")
    a = ap.parse_args()
    root = Path(a.results or tempfile.mkdtemp(prefix="rlsweep-eta-"))
    sweep = load_sweep(REPO / a.sweep)
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "snakemake", "--config", f"sweep={a.sweep}", f"results={root}"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: list[tuple[float, float | None, str]] = []  # (elapsed, predicted end as elapsed, the ETA's words)
    watcher = None
    while proc.poll() is None:
        time.sleep(a.every)
        if watcher is None and (root / sweep.name).is_dir():
            watcher = Watcher(load_sweep(REPO / a.sweep), root)
        if watcher is None:
            continue
        snap = watcher.snapshot()
        eta = snap.eta
        based = eta is not None and eta.jobs and eta.unbased < eta.jobs
        seen.append((snap.taken_at - t0, snap.taken_at - t0 + eta.seconds if based else None,
                     eta.text(snap.taken_at) if eta is not None else "-"))
    end = time.time() - t0
    if proc.returncode:
        print(f"snakemake exited {proc.returncode}; results under {root}", file=sys.stderr)
        return 1
    print(f"{a.sweep}: ran {end:.0f} s ({len(seen)} snapshots, every {a.every:g} s); results under {root}")
    print(f"{'at':>5} {'elapsed s':>9} {'predicted end s':>15} {'error s':>8} {'left: predicted/real':>20}  ETA shown")
    for share in (0.10, 0.25, 0.50, 0.75):
        at, predicted, words = min(seen, key=lambda s: abs(s[0] - share * end))
        if predicted is None:
            print(f"{share:>5.0%} {at:>9.0f} {'-':>15} {'-':>8} {'-':>20}  {words}")
            continue
        ratio = (predicted - at) / (end - at) if end > at else float("nan")
        print(f"{share:>5.0%} {at:>9.0f} {predicted:>15.0f} {predicted - end:>+8.0f} {ratio:>20.2f}  {words}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
