"""Did RL improve the model it started from? Per setting and benchmark: the start's avg@k (the step-0 evaluation its
seeds share), each seed's final avg@k, and the paired final − start pooled over seeds and problems with its 95%
bootstrap interval (the report's `paired` query, versus 'start': the same numbers as the report's gain table).

Read by `bench/demo_kernels.py` (the demo under several CPU float-kernel choices) and by the demo's gain test
(tests/long/test_demo_gain.py): a gain "holds" when every seed ends above the start and the interval excludes 0."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from workflow.report.build import planned_runs
from workflow.report.queries import blocks, fill
from workflow.results.catalog import Catalog

# each run's step-0 and final avg@k (all of its samples: k = n_samples), by setting, seed and benchmark
_ENDS = """
WITH planned AS ($planned)
SELECT p.label, p.seed, e.benchmark, e.step = 0 AS start, e.avg_at_k
FROM eval_scores e JOIN planned p USING (run_id, eval_id)
WHERE e.k = e.n_samples AND (e.step = p.steps OR e.step = 0)
ORDER BY p.label, p.seed, e.benchmark
"""


@dataclass
class Gain:
    label: str
    benchmark: str
    start: float | None = None  # None: no step-0 evaluation (eval.at_start off)
    finals: dict[int, float] = field(default_factory=dict)  # seed -> final avg@k
    mean_diff: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None

    def finals_text(self) -> str:
        return ", ".join(f"{f:.3f}" for _, f in sorted(self.finals.items()))

    def diff_text(self) -> str:
        """The pooled final − start with its interval, as the report writes it ("" before it is known)."""
        return "" if self.mean_diff is None else f"{self.mean_diff:+.3f} [{self.ci_low:+.3f}, {self.ci_high:+.3f}]"

    def shortfalls(self) -> list[str]:
        """Why this gain does not hold, in words; empty when it does."""
        where = f"{self.label} on {self.benchmark}"
        if self.start is None or not self.finals:
            return [f"{where}: no {'start' if self.start is None else 'final'} evaluation"]
        out = [f"{where}, seed {s}: final {f:.3f} is not above the start {self.start:.3f}"
               for s, f in sorted(self.finals.items()) if f <= self.start]
        if self.ci_low is None or self.ci_low <= 0:
            out.append(f"{where}: the paired interval [{_f(self.ci_low)}, {_f(self.ci_high)}] does not exclude 0")
        return out


def _f(x: float | None) -> str:
    return "?" if x is None else f"{x:+.3f}"


def gains(sweep, results_root: str | Path) -> list[Gain]:
    """The gains of every setting of `sweep` (workflow.sweep.expand.Sweep) from its tables under `results_root`."""
    planned = planned_runs(sweep)
    catalog = Catalog(results_root, sweep.name, planned=sweep.members())
    try:
        by_key: dict[tuple[str, str], Gain] = {}
        for r in catalog.query(fill(planned, text=_ENDS)).to_pylist():
            g = by_key.setdefault((r["label"], r["benchmark"]), Gain(r["label"], r["benchmark"]))
            if r["start"]:
                g.start = r["avg_at_k"]
            else:
                g.finals[r["seed"]] = r["avg_at_k"]
        for r in catalog.query(blocks(fill(planned))["paired"]).to_pylist():
            if r["versus"] == "start" and (r["label"], r["benchmark"]) in by_key:
                g = by_key[r["label"], r["benchmark"]]
                g.mean_diff, g.ci_low, g.ci_high = r["mean_diff"], r["ci_low"], r["ci_high"]
    finally:
        catalog.close()
    return list(by_key.values())
