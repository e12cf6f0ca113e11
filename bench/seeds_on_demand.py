"""Seeds on demand, the test of the test: simulated designs (no training), scores from known distributions.

    python bench/seeds_on_demand.py                 # ~2-3 min on 2 cores
    python bench/seeds_on_demand.py --designs 3000  # tighter Monte Carlo error

Rows:
- null: 3 equal settings, normal and two-peaked ("some seeds collapse") scores. The family-wise error must be within
  Monte Carlo noise of the level or below it. Beside it, the fault the test avoids (a fixed-sample test at every
  look, uncorrected) and, when installed (`pip install adastop==0.1.3`), the PyPI package by the paper's authors:
  its boundary is one-sided for a two-sided test (workflow/design/adastop.py says why we implement the test).
- alternative: one pair (2 settings) and three settings (0, 1, 1), differences of one seed-sd. Power and mean seeds
  per design of the sequential design, against the fixed design (one look, the same test) with the fewest seeds
  per setting whose power is at least the sequential design's: the share of seeds (GPU-hours: every run of a
  setting costs the same) saved at equal error and power.
Each line says its Monte Carlo error: the designs' binomial se; the permutation paths (--paths) add their own,
smaller, error to each boundary.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workflow.design.simulate import RepeatedFixedTest, adastop, collapsing, normal, simulate  # noqa: E402


def package_factory(n, K, alpha, paths):
    """The PyPI package behind simulate()'s interface, or None when it is not installed."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from adastop import MultipleAgentsComparator
    except ImportError:
        return None
    import numpy as np

    class Package:
        def __init__(self, settings, d):
            self.settings = settings
            self.c = MultipleAgentsComparator(n=n, K=K, B=paths, alpha=alpha, seed=d)
            self.pairs = [(a, b) for i, a in enumerate(settings) for b in settings[i + 1:]]
            self.decisions = {p: "continue" for p in self.pairs}

        @property
        def finished(self):
            return self.c.is_finished or self.c.k >= K

        @property
        def in_play(self):
            return self.settings  # (the package takes every setting's values at every look)

        def look(self, values):
            self.c.partial_compare({s: np.asarray(values[s]) for s in self.settings}, verbose=False)
            for (i, j), p in zip(self.c.comparisons, self.pairs):
                self.decisions[p] = self.c.decisions[str(np.array([i, j]))]
            return self.decisions

    return Package


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--designs", type=int, default=1000)
    p.add_argument("--n", type=int, default=5, help="seeds per setting per round")
    p.add_argument("--K", type=int, default=4, help="rounds at most")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--paths", type=int, default=10_000, help="permutation paths per boundary")
    p.add_argument("--package-designs", type=int, default=400, help="designs for the PyPI package (slow: Python loops)")
    p.add_argument("--differences", type=float, nargs="+", default=[0.5, 1.0, 1.5, 2.0],
                   help="true differences (in seed-sds) of the two-setting alternatives")
    a = p.parse_args()
    n, K, alpha, D = a.n, a.K, a.alpha, a.designs
    ours = adastop(n, K, alpha, a.paths)
    se = math.sqrt(alpha * (1 - alpha) / D)
    print(f"design: n={n} seeds per setting per round, K={K} rounds, alpha={alpha}, {a.paths} permutation paths; "
          f"{D} designs per row (binomial se at the level {se:.4f})")
    print("\nnull, 3 equal settings: family-wise error")
    rows = [("adastop (ours), normal", ours, normal(0.0), D),
            ("adastop (ours), collapsing seeds", ours, collapsing(0.0), D),
            ("fault: fixed test at every look", lambda s, d: RepeatedFixedTest(s, n, K, alpha, seed=d), normal(0.0), D)]
    package = package_factory(n, K, alpha, a.paths)
    if package is not None:
        rows.append(("adastop 0.1.3 (PyPI), normal", package, normal(0.0), a.package_designs))
    else:
        print("  (adastop 0.1.3 not installed: its row is left out)")
    for name, make, scores, designs in rows:
        t = time.perf_counter()
        out = simulate(make, [scores] * 3, [0.0] * 3, n, designs, seed=1)
        verdict = "held" if out.level_held(alpha) else "EXCEEDED"
        print(f"  {name:36s} {out.error:.4f} ± {out.error_se:.4f}  ({verdict}; {designs} designs, "
              f"{out.seeds:.1f} seeds, {time.perf_counter() - t:.0f} s)")

    print(f"\nalternative: power and seeds per design, against the fixed design (one look) of the same error with the "
          "fewest seeds whose power is at least as high")
    cases = [(f"2 settings, difference {d:g} sd", [0.0, d]) for d in a.differences]
    cases.append(("3 settings (0, 1, 1) sd", [0.0, 1.0, 1.0]))
    for title, means in cases:
        compare_fixed(title, means, ours, n, K, alpha, a.paths, D)
    return 0


def compare_fixed(title, means, ours, n, K, alpha, paths, D) -> None:
    scores = [normal(m) for m in means]
    seq = simulate(ours, scores, means, n, D, seed=2)
    print(f"  {title}: sequential power {seq.power:.3f} (se {math.sqrt(seq.power * (1 - seq.power) / D):.3f}), "
          f"error {seq.error:.3f}, {seq.seeds:.1f} seeds ({seq.rounds:.2f} rounds)")
    for N in range(1, 4 * n * K):
        out = simulate(adastop(N, 1, alpha, paths), scores, means, N, D, seed=3)
        if out.power >= seq.power:
            fixed_seeds = N * len(means)
            print(f"    fixed: {N} seeds per setting ({fixed_seeds} in all), power {out.power:.3f}, error "
                  f"{out.error:.3f}; GPU-hours saved at equal error and power: {1 - seq.seeds / fixed_seeds:.1%}")
            return
    print("    no fixed design up to the search's end reached that power")


if __name__ == "__main__":
    sys.exit(main())
