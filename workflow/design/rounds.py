"""A design's rounds as records: what each round trains, and what its look saw and decided.

The driver records round r in results/<sweep>/design/rounds/round_<r>.json before its runs start (the settings
still in play, their grid points, the round's seed values, the run ids), and adds the look (each setting's values in
seed order, the decisions) once the round's runs are evaluated and tested. The Snakefile and every command that
lists a sweep's runs read the records back (`recorded_runs`), so the rules, and every nested `snakemake` the driver
starts, know the later rounds' runs. A record with a look is final: a driver started again replays those looks
into a fresh comparator (the test's state lives in memory) and resumes at the first round without one.

The records name the design they belong to (`design_key`: its test's parameters and its pairs); a sweep file whose
design changed since its first round is refused, since the test's boundaries were fixed by the first look.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workflow.atomic import write_json
from workflow.errors import UserError
from workflow.identity import canonical_json, stable_id
from workflow.layout import round_record, round_records
from workflow.sweep.expand import PointError, Run, runs_for
from workflow.sweep.families import Family, all_pairs, compared_settings, families


class DesignChanged(UserError):
    """The sweep file's design is not the one its recorded rounds were run and tested under."""


@dataclass
class Round:
    number: int
    seeds: list[int]
    settings: list[str]  # labels, in family order
    points: dict[str, dict[str, Any]]  # label -> grid point (without the seed)
    run_ids: dict[str, list[str]]  # label -> run ids in seed order
    design: str  # design_key
    values: dict[str, list[float]] | None = None  # label -> the metric per run, in seed order (after the look)
    decisions: dict[str, str] | None = None  # "a | b" -> verdict after the look
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def looked(self) -> bool:
        return self.values is not None

    def to_json(self) -> dict[str, Any]:
        return {"round": self.number, "design": self.design, "seeds": self.seeds, "settings": self.settings,
                "points": self.points, "run_ids": self.run_ids, "values": self.values, "decisions": self.decisions,
                **self.extra}


def pair_name(pair: tuple[str, str]) -> str:
    return f"{pair[0]} | {pair[1]}"


def design_key(spec, found: list[Family]) -> str:
    """What fixes the test's boundaries and the seeds of each round: the design's parameters (not its budget, which
    may only end it early) and its pairs. Twelve hex digits."""
    d = spec.design
    return stable_id(canonical_json({
        "compare": d.compare, "metric": d.metric if isinstance(d.metric, str) else d.metric.model_dump(mode="json"),
        "per_round": d.per_round, "rounds": d.rounds, "error": d.error, "first": d.first,
        "permutations": d.permutations, "test_seed": d.test_seed, "pairs": [list(p) for p in all_pairs(found)]}))


def read_rounds(results_root: str | Path, sweep: str) -> list[Round]:
    out = []
    for path in round_records(results_root, sweep):
        try:
            d = json.loads(path.read_text())
            out.append(Round(number=d["round"], seeds=d["seeds"], settings=d["settings"], points=d["points"],
                             run_ids=d["run_ids"], design=d["design"], values=d.get("values"),
                             decisions=d.get("decisions"),
                             extra={k: v for k, v in d.items() if k not in Round.__dataclass_fields__ and k != "round"}))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UserError(f"{path}: a design's round record that does not read ({e}); it is the design's only "
                            "record of what that round trained and saw: restore it, or remove it and every later "
                            "round's record to run those rounds again") from None
    numbers = [r.number for r in out]
    if numbers != list(range(1, len(out) + 1)):
        raise UserError(f"{round_records(results_root, sweep)[0].parent}: the round records are {numbers}, not "
                        "1, 2, ...: a record is missing")
    return out


def write_round(results_root: str | Path, sweep: str, r: Round) -> Path:
    return write_json(round_record(results_root, sweep, r.number), r.to_json())


def check_design(rounds: list[Round], key: str, path: str) -> None:
    """Refuse a sweep file whose design is not the one its recorded rounds ran under."""
    if rounds and rounds[0].design != key:
        raise DesignChanged(
            f"{path}: seeds: the design (its compare, metric, per_round, rounds, error, first, permutations, "
            f"test_seed, or the settings it pairs) changed since round 1 was recorded (design {rounds[0].design}, now "
            f"{key}): the test's boundaries were fixed by its first look. Give the sweep another name to start a new "
            "design (its seeds already trained are reused), or restore the design; a budget (gpu_hours) may change")


def round_runs(spec, round_: Round) -> list[Run]:
    """The runs of a recorded round (a setting whose point no longer makes a run is skipped: the sweep file
    changed, and check_design refuses it where it matters)."""
    runs: list[Run] = []
    for label in round_.settings:
        try:
            runs += runs_for(spec, round_.points[label], seeds=round_.seeds)
        except PointError:
            continue
    return runs


def recorded_runs(spec, results_root: str | Path, sweep: str) -> list[Run]:
    """The runs of every recorded round (round 1's are the sweep's expansion already)."""
    try:
        rounds = read_rounds(results_root, sweep)
    except UserError:
        return []  # (the driver says why; a listing shows what the file plans)
    return [run for r in rounds if r.number > 1 for run in round_runs(spec, r)]


def new_round(spec, sweep_runs: list[Run], number: int, in_play: list[str], key: str) -> Round:
    """Round `number` for the settings still in play: their points, this round's seeds, their runs' ids."""
    found = families(spec, sweep_runs)
    settings = {s.label: s for s in compared_settings(found)}
    if number == 1:  # round 1: every setting of the sweep (its expansion), paired or not
        settings = {r.label: settings.get(r.label) for r in sweep_runs}
        points = {r.label: {k: v for k, v in r.assignment.items() if k != "seed"} for r in sweep_runs}
        labels = list(dict.fromkeys(r.label for r in sweep_runs))
    else:
        points = {label: settings[label].point for label in in_play}
        labels = list(in_play)
    seeds = spec.design.seeds_of_round(number)
    r = Round(number=number, seeds=seeds, settings=labels, points={k: points[k] for k in labels}, run_ids={},
              design=key)
    for run in round_runs(spec, r):
        r.run_ids.setdefault(run.label, []).append(run.run_id)
    return r
