"""Where a design stands, from its round records alone (no DuckDB: `rlsweep status` and `rlsweep watch` read it at
every refresh): the round (r of K), each pair's state, and the seeds and GPU-hours spent."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from workflow.design.rounds import Round, pair_name, read_rounds
from workflow.errors import UserError
from workflow.sweep.families import families, shown

BUDGET = "undecided (budget)"
OPEN = "open"


@dataclass
class PairState:
    family: str
    a: str
    b: str
    verdict: str  # larger / smaller / equal / open / undecided (budget)
    decided_at: int | None
    seeds_a: int
    seeds_b: int
    mean_a: float | None
    mean_b: float | None


@dataclass
class DesignState:
    K: int
    looked: int  # rounds tested
    training: Round | None  # a round recorded but not tested yet (running, or left by a dead driver)
    pairs: list[PairState]
    seeds: int  # RL runs the design has trained (or started) in all
    spent: float | None  # GPU-hours (or hours) the design's jobs spent, as of the last look
    stopped: str | None  # why the budget ended it
    error: str | None = None  # the records do not read


def design_state(sweep, results_root: str | Path) -> DesignState:
    d = sweep.spec.design
    found = families(sweep.spec, sweep.runs)
    try:
        rounds = read_rounds(results_root, sweep.name)
    except UserError as e:
        return DesignState(d.rounds, 0, None, [], 0, None, None, error=str(e))
    looked = [r for r in rounds if r.looked]
    training = next((r for r in rounds if not r.looked), None)
    latest = looked[-1].decisions if looked else {}
    stopped = looked[-1].extra.get("stopped") if looked else None
    pairs = []
    for f in found:
        for a, b in f.pairs:
            verdict = (latest or {}).get(pair_name((a, b)), "continue")
            decided_at = next((r.number for r in looked if (r.decisions or {}).get(pair_name((a, b)), "continue")
                               != "continue"), None)
            if verdict == "continue":
                verdict = BUDGET if stopped else OPEN
            # what the test saw of the pair: at its decision (a side may train on for another pair)
            upto = looked[:decided_at] if decided_at else looked
            va = [v for r in upto for v in (r.values or {}).get(a, [])]
            vb = [v for r in upto for v in (r.values or {}).get(b, [])]
            pairs.append(PairState(f.fixed, a, b, verdict, decided_at, len(va), len(vb), _mean(va), _mean(vb)))
    seeds = sum(len(ids) for r in rounds for ids in r.run_ids.values())
    spent = looked[-1].extra.get("spent") if looked else None
    return DesignState(d.rounds, len(looked), training, pairs, seeds, spent, stopped)


def _mean(v: list[float]) -> float | None:
    return sum(v) / len(v) if v else None


def line(s: DesignState) -> str:
    """One line: round, pairs decided, seeds, GPU-hours."""
    if s.error:
        return f"design: {s.error}"
    decided = sum(p.verdict not in (OPEN, BUDGET) for p in s.pairs)
    now = (f"round {s.training.number} of {s.K} training ({len(s.training.settings)} setting(s) x seeds "
           f"{s.training.seeds[0]}-{s.training.seeds[-1]})" if s.training is not None else
           f"round {s.looked} of {s.K} tested" if s.looked else f"not started (K = {s.K} rounds)")
    over = ("; stopped by the budget" if s.stopped else
            "; done" if s.looked and s.training is None and (decided == len(s.pairs) or s.looked == s.K) else "")
    spent = f"; {s.spent:.3g} GPU-hours spent" if s.spent is not None else ""
    return (f"design: {now}{over}; {decided} of {len(s.pairs)} pair(s) decided; {s.seeds} RL run(s){spent}")


def table(s: DesignState, design) -> Table | None:
    if s.error or not s.pairs:
        return None
    t = Table(title="seeds on demand: the comparisons (rlsweep query \"select * from decisions\")")
    for col in ("family", "pair", "state", "decided at", "mean a", "mean b", "seeds a/b"):
        t.add_column(col, justify="right" if col.startswith(("mean", "seeds", "decided")) else "left")
    style = {"larger": "green", "smaller": "green", "equal": "cyan", OPEN: "yellow", BUDGET: "red"}
    for p in s.pairs:
        t.add_row(p.family or "(all)", f"{shown(design, p.a)} vs {shown(design, p.b)}", f"[{style.get(p.verdict, '')}]{p.verdict}[/]",
                  f"round {p.decided_at}" if p.decided_at else "",
                  "" if p.mean_a is None else f"{p.mean_a:.4g}", "" if p.mean_b is None else f"{p.mean_b:.4g}",
                  f"{p.seeds_a}/{p.seeds_b}")
    return t
