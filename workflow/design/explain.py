"""A design in one screen, before it runs: its families and pairs, n, K, the level, which round can first decide,
the most seeds and GPU-hours it can spend, and what the budget covers (`rlsweep validate` and `rlsweep plan`)."""

from __future__ import annotations

from pathlib import Path

from workflow.design.cost import Price, price
from workflow.design.rounds import design_key, new_round, round_runs
from workflow.study.objective import objective_name
from workflow.sweep.design_spec import BASELINE, first_look_splits
from workflow.sweep.families import compared_settings, families


def first_round_note(design) -> tuple[str, bool]:
    """What the floor on n means for this design, and whether it is a warning (the first round cannot decide)."""
    n, K, a = design.per_round, design.rounds, design.error
    first = design.first_deciding_round
    splits = first_look_splits(n)
    if first == 1:
        return (f"the first round can decide: C({2 * n}, {n}) = {splits} splits, 2/{splits} <= {a:g}/{K}", False)
    return (f"warning: seeds.per_round {n} is too small for the first round to decide (C({2 * n}, {n}) = {splits} "
            f"splits: 2/{splits} > {a:g}/{K}); the earliest decision is at round {first} of {K}. per_round >= "
            f"{_smallest(K, a)} decides from the first round", True)


def _smallest(K: int, alpha: float) -> int:
    from workflow.sweep.design_spec import smallest_n_for_first_look
    return smallest_n_for_first_look(K, alpha)


def worst_case_rounds(sweep):
    """Round 1 (every setting) then K - 1 rounds of every compared setting: the most the design can train."""
    found = families(sweep.spec, sweep.runs)
    key = design_key(sweep.spec, found)
    settings = [s.label for s in compared_settings(found)]
    return [new_round(sweep.spec, sweep.runs, 1, [], key)] + [
        new_round(sweep.spec, sweep.runs, k, settings, key) for k in range(2, sweep.spec.design.rounds + 1)]


def prices(sweep, root: str | Path) -> tuple[Price, Price]:
    """(round 1, the worst case) at the plan's estimates."""
    rounds = worst_case_rounds(sweep)
    first = price(sweep, round_runs(sweep.spec, rounds[0]), root)
    worst = price(sweep, [run for r in rounds for run in round_runs(sweep.spec, r)], root)
    return first, worst


def budget_note(design, first: Price, worst: Price) -> str | None:
    if design.gpu_hours is None:
        return None
    b = design.gpu_hours
    if worst.hours <= b:
        return f"budget {b:g} {worst.unit}: covers the worst case"
    later = (worst.hours - first.hours) / max(design.rounds - 1, 1)
    if first.hours > b:
        return f"budget {b:g} {worst.unit}: does not cover round 1 ({first.text()}): the design would stop before it"
    covered = 1 + (int((b - first.hours) // later) if later > 0 else design.rounds - 1)
    return (f"budget {b:g} {worst.unit}: covers {min(covered, design.rounds)} of {design.rounds} rounds of the worst "
            f"case (each later round of every setting ~{later:.3g}); rounds it cannot pay for leave their pairs "
            "`undecided (budget)`")


def lines(sweep, root: str | Path) -> list[tuple[str, bool]]:
    """(line, is a warning) of the design's screen."""
    d = sweep.spec.design
    found = families(sweep.spec, sweep.runs)
    compared = compared_settings(found)
    pairs = sum(len(f.pairs) for f in found)
    what = ("every setting against report.baseline" if d.compare == BASELINE else
            f"the values of {d.compare}, the other keys fixed")
    out = [(f"seeds on demand: {what}; {len(found)} famil{'y' if len(found) == 1 else 'ies'}, {pairs} pair(s), "
            f"family-wise error {d.error:g} over every pair and round; metric {objective_name(d.metric)}", False)]
    for f in found:
        out.append((f"  family {f.fixed or '(all)'}: " + ", ".join(f"{a} vs {b}" for a, b in f.pairs), False))
    seeds = d.seeds_of_round
    out.append((f"n = {d.per_round} seed(s) per setting per round (round 1: seeds {_span(seeds(1))}, round 2: "
                f"{_span(seeds(2))}, ...), K = {d.rounds} round(s) at most; pairs still open after round {d.rounds} "
                "end `equal`", False))
    out.append(first_round_note(d))
    unpaired = len({r.label for r in sweep.runs}) - len(compared)
    most = len(sweep.runs) + (d.rounds - 1) * d.per_round * len(compared)
    out.append((f"at most {most} RL run(s): {len(sweep.runs)} in round 1, then up to {d.per_round * len(compared)} a "
                f"round ({d.rounds * d.per_round} seeds per compared setting)"
                + (f"; {unpaired} setting(s) in no pair train round 1 only" if unpaired else ""), False))
    first, worst = prices(sweep, root)
    out.append((f"cost: round 1 {first.text()}; the worst case {worst.text()}", False))
    note = budget_note(d, first, worst)
    if note:
        out.append((note, note.startswith("budget") and "does not cover round 1" in note))
    return out


def _span(seeds: list[int]) -> str:
    return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
