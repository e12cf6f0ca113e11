"""The report's Comparisons section (a sweep with seeds on demand): one row per pair the design compared.

Per pair: the verdict; the mean difference of the metric (a - b) over the seeds the test saw, with a 95% Welch
interval over seeds; each side's seeds and the rounds; the GPU-hours the design had spent when the pair was decided
(or at its end); and beside it, the seeds per setting a fixed design would have needed for the same error and power:
a two-sided t-test at error / pairs (Bonferroni: the same family-wise error over the pairs), 80% power, to detect the
difference observed with the spread observed (workflow/report/power.py). From the design's round records
(workflow/design/rounds.py): the values the test saw, not the tables as they are now.
"""

from __future__ import annotations

import math
from pathlib import Path

from workflow.design.rounds import read_rounds
from workflow.design.status import BUDGET, design_state
from workflow.errors import UserError
from workflow.report import power
from workflow.report.tables import Cell, Section, Table, fmt
from workflow.sweep.families import shown

POWER = 0.8


def _welch(a: list[float], b: list[float]) -> tuple[float, float | None, float | None]:
    """(difference of means, the 95% interval's ends); no interval with fewer than 2 seeds a side."""
    d = sum(a) / len(a) - sum(b) / len(b)
    if len(a) < 2 or len(b) < 2:
        return d, None, None
    va = sum((x - sum(a) / len(a)) ** 2 for x in a) / (len(a) - 1)
    vb = sum((x - sum(b) / len(b)) ** 2 for x in b) / (len(b) - 1)
    se2 = va / len(a) + vb / len(b)
    if se2 == 0:
        return d, d, d
    df = se2 ** 2 / ((va / len(a)) ** 2 / (len(a) - 1) + (vb / len(b)) ** 2 / (len(b) - 1))
    from scipy import stats  # (only for a report with a design)
    half = float(stats.t.ppf(0.975, df)) * math.sqrt(se2)
    return d, d - half, d + half


def section(sweep, results_root: str | Path) -> Section | None:
    if sweep.spec.design is None:
        return None
    try:
        rounds = [r for r in read_rounds(results_root, sweep.name) if r.looked]
    except UserError:
        return None
    if not rounds:
        return None
    d, state = sweep.spec.design, design_state(sweep, results_root)
    n_pairs = max(len(state.pairs), 1)
    t = Table(["family", "a vs b", "verdict", "difference a - b [95%]", "seeds a/b", "rounds", "GPU-hours",
               "fixed design: seeds per setting"])
    for p in state.pairs:
        upto = rounds[:p.decided_at] if p.decided_at else rounds
        a = [v for r in upto for v in (r.values or {}).get(p.a, [])]
        b = [v for r in upto for v in (r.values or {}).get(p.b, [])]
        if not a or not b:
            continue
        diff, low, high = _welch(a, b)
        spent = upto[-1].extra.get("spent")
        pooled = _pooled(a, b)
        fixed = (power.seeds_needed(abs(diff), pooled, POWER, d.error / n_pairs)
                 if diff != 0 and pooled is not None else None)
        t.rows.append([
            Cell(p.family or "(all)"), Cell(f"{shown(d, p.a)} vs {shown(d, p.b)}"),
            Cell(p.verdict, mark="best" if p.verdict in ("larger", "smaller") else ""),
            Cell(f"{diff:+.3f}" + (f" [{low:+.3f}, {high:+.3f}]" if low is not None else "")),
            Cell(f"{len(a)}/{len(b)}"), Cell(f"{len(upto)} of {d.rounds}"), Cell(fmt(spent, 3)),
            Cell("—" if fixed is None else str(fixed))])
    stopped = state.stopped
    t.notes.append(
        f"Seeds on demand (AdaStop, a group-sequential permutation test; docs/seeds-on-demand.md): {d.per_round} "
        f"seed(s) per setting per round, at most {d.rounds} rounds, family-wise error {d.error:g} over every pair and "
        "round. larger / smaller: a's metric above / below b's; equal: still open after the last round (no "
        "difference found, not a proof of none)" + (f"; {BUDGET}: {stopped}" if stopped else "") + ". The interval "
        "is Welch's over the seeds the test saw. Fixed design: the seeds per setting a single t-test at "
        f"{d.error:g}/{n_pairs} (the same family-wise error) needs for {POWER:.0%} power to detect the observed "
        "difference with the observed spread; — where the difference is 0 or a side has one seed.")
    return Section("Comparisons", "comparisons", [t])


def _pooled(a: list[float], b: list[float]) -> float | None:
    if len(a) < 2 or len(b) < 2:
        return None
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    return (sum((x - ma) ** 2 for x in a) + sum((x - mb) ** 2 for x in b)) / (len(a) + len(b) - 2)

