"""Sweep expansion: grid x zip (+ conditional axes) - excludes, x seeds -> validated Run records.

Identity is per stage (workflow/stages.py): the SFT job is keyed by engine + model + task + sft only, so RL runs
that differ in RL settings or RL seed share one SFT job; an RL run is keyed by its SFT id + its RL settings +
seed; an eval by its RL id + eval settings, so changing eval settings never retrains anything.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from workflow.config import RunConfig
from workflow.eval.plan import eval_jobs
from workflow.stages import overlap_benchmarks, stage_config
from workflow.strict import format_validation_error
from workflow.sweep.identity import stable_id
from workflow.sweep.keys import apply, check_key, format_point, format_value, lookup, value_matches
from workflow.sweep.spec import ConditionalAxis, SweepError, SweepSpec, read_spec


@dataclass(frozen=True)
class Run:
    """One SFT -> RL -> eval chain. `run_id` is the RL stage's id: the id every table uses for the run."""

    config: RunConfig
    assignment: dict[str, Any]  # the dotted keys this grid point set (seed included)
    sft_id: str | None
    run_id: str
    eval_id: str
    data_id: str | None = None  # the data stage of a `datasets` task
    overlap_id: str | None = None  # its check against this run's evaluated benchmarks (None: nothing to check)

    @property
    def label(self) -> str:
        """The point's settings without the seed: runs with the same label are replicates."""
        return " ".join(f"{k}={format_value(v)}" for k, v in self.assignment.items() if k != "seed") or "base"

    @property
    def method(self) -> str:
        return self.config.rl.update

    def stage_config(self, stage: str) -> dict[str, Any]:
        return stage_config(self.config, stage, sft_id=self.sft_id, run_id=self.run_id, data_id=self.data_id)

    @property
    def eval_jobs(self) -> list[tuple[int, str]]:
        """(RL step, benchmark group) of each of this run's eval jobs."""
        return eval_jobs(self.config)


class PointError(ValueError):
    """A grid point or trial whose settings do not make valid runs: `problems` are `key: reason` lines for the
    first `assignment` (the point with its seed) that failed."""

    def __init__(self, problems: list[str], assignment: dict[str, Any]):
        self.problems, self.assignment = problems, assignment
        super().__init__("; ".join(problems))


def runs_for(spec: SweepSpec, point: dict[str, Any]) -> list[Run]:
    """The runs of one grid point (or one Optuna trial's parameters): the point applied to the sweep's base, once
    per seed of `seeds:`, each validated (and checked by verl's own code on the verl engine)."""
    runs = []
    for seed in spec.seeds:
        assignment = {**point, "seed": seed}
        try:
            cfg = RunConfig.model_validate(apply(spec.base, assignment))
        except ValidationError as e:
            raise PointError(format_validation_error(e), assignment) from None
        if cfg.engine.name == "verl":  # verl's own checks on the translated config
            from workflow.engines.verl.compose import VerlConfigError, validate  # (verl runs only)
            try:
                validate(cfg)
            except VerlConfigError as e:
                raise PointError([str(e)], assignment) from None
        data_id = stable_id(stage_config(cfg, "data")) if cfg.task.name == "datasets" else None
        overlap_id = (stable_id(stage_config(cfg, "overlap", data_id=data_id))
                      if data_id is not None and overlap_benchmarks(cfg) else None)
        sft_id = stable_id(stage_config(cfg, "sft", data_id=data_id)) if cfg.sft.enabled else None
        run_id = stable_id(stage_config(cfg, "rl", sft_id=sft_id, data_id=data_id))
        eval_id = stable_id(stage_config(cfg, "eval", run_id=run_id))
        runs.append(Run(config=cfg, assignment=assignment, sft_id=sft_id, run_id=run_id, eval_id=eval_id,
                        data_id=data_id, overlap_id=overlap_id))
    return runs


@dataclass
class Sweep:
    name: str
    path: str
    spec: SweepSpec
    runs: list[Run]
    by_run_id: dict[str, Run] = field(init=False)
    sft_configs: dict[str, dict] = field(init=False)
    data_configs: dict[str, dict] = field(init=False)  # data stages (datasets tasks)
    overlap_configs: dict[str, dict] = field(init=False)
    sft_overlaps: dict[str, set[str]] = field(init=False)  # SFT id -> the overlap checks of every run sharing it

    def __post_init__(self) -> None:
        self.by_run_id, self.sft_configs, self.data_configs, self.overlap_configs = {}, {}, {}, {}
        self.sft_overlaps = {}
        runs, self.runs = self.runs, []
        self.add_runs(runs)

    def add_runs(self, runs: list[Run]) -> None:
        """Add runs not known yet (an Optuna study's trials become runs as they are asked for)."""
        known = {(r.run_id, r.eval_id) for r in self.runs}
        for r in runs:
            if (r.run_id, r.eval_id) in known:  # a repeated proposal of a study: the same run
                continue
            known.add((r.run_id, r.eval_id))
            self.runs.append(r)
            self.by_run_id[r.run_id] = r
            if r.sft_id is not None:
                self.sft_configs.setdefault(r.sft_id, r.stage_config("sft"))
            if r.data_id is not None:
                self.data_configs.setdefault(r.data_id, r.stage_config("data"))
            if r.overlap_id is not None:
                self.overlap_configs.setdefault(r.overlap_id, r.stage_config("overlap"))
                if r.sft_id is not None:
                    self.sft_overlaps.setdefault(r.sft_id, set()).add(r.overlap_id)


def load_sweep(path: str | Path) -> Sweep:
    spec = read_spec(path)
    return Sweep(name=spec.name, path=str(path), spec=spec, runs=expand(spec, path))


# ----------------------------------------------------------------------------------------------------------------


def expand(spec: SweepSpec, path: str | Path = "<sweep>") -> list[Run]:
    problems: list[str] = []
    try:
        base = RunConfig.model_validate(spec.base)
    except ValidationError as e:
        problems += format_validation_error(e, prefix="base")
    for where, key in _all_dotted_keys(spec):
        problems += check_key(where, key)
    problems += _check_lists(spec)
    if spec.optuna is not None:
        from workflow.study.space import check_space  # Optuna is imported only by sweeps that use it
        problems += check_space(spec)
    if problems:
        raise SweepError(path, problems)
    if spec.optuna is not None:
        return []  # an Optuna sweep's runs are its trials, made when the study asks for them

    points = _product(spec)
    points = _apply_conditionals(spec, base, points)
    points = [p for p in points if not any(_matches(p, ex) for ex in spec.exclude)]
    if not points:
        raise SweepError(path, ["exclude: every grid point is excluded; nothing to run"])

    runs: list[Run] = []
    seen: dict[tuple[str, str], dict] = {}
    for point in points:
        try:
            point_runs = runs_for(spec, point)
        except PointError as e:
            problems += [f"grid point {format_point(e.assignment)}: {line}" for line in e.problems]
            continue
        for run in point_runs:
            key = (run.run_id, run.eval_id)
            if key in seen:
                problems.append(f"grid points {format_point(seen[key])} and {format_point(run.assignment)} expand "
                                f"to the same run {run.run_id}: a value repeats or equals another after validation")
                continue
            seen[key] = run.assignment
            runs.append(run)
    if problems:
        raise SweepError(path, problems)
    return runs


def _all_dotted_keys(spec: SweepSpec):
    for k, axis in spec.grid.items():
        yield f"grid.{k}", k
        if isinstance(axis, ConditionalAxis):
            for ck in axis.when:
                yield f"grid.{k}.when.{ck}", ck
    for i, group in enumerate(spec.zip_groups):
        for k in group:
            yield ("zip" if isinstance(spec.zip_, dict) else f"zip[{i}]") + f".{k}", k
    for i, ex in enumerate(spec.exclude):
        for k in ex:
            yield f"exclude[{i}].{k}", k


def _check_lists(spec: SweepSpec) -> list[str]:
    problems = []
    for k, axis in spec.grid.items():
        values = axis.values if isinstance(axis, ConditionalAxis) else axis
        if not values:
            problems.append(f"grid.{k}: empty list; a grid axis needs at least one value")
    for i, group in enumerate(spec.zip_groups):
        where = "zip" if isinstance(spec.zip_, dict) else f"zip[{i}]"
        lengths = {k: len(v) for k, v in group.items()}
        if any(n == 0 for n in lengths.values()):
            problems.append(f"{where}: empty list in {lengths}")
        if len(set(lengths.values())) > 1:
            problems.append(f"{where}: lists must have the same length, got "
                            + ", ".join(f"{k}: {n}" for k, n in lengths.items()))
    return problems


def _product(spec: SweepSpec) -> list[dict[str, Any]]:
    axes: list[list[dict[str, Any]]] = []
    for k, axis in spec.grid.items():
        if not isinstance(axis, ConditionalAxis):
            axes.append([{k: v} for v in axis])
    for group in spec.zip_groups:
        if group:
            keys = list(group)
            axes.append([dict(zip(keys, vals)) for vals in zip(*group.values())])
    return [{k: v for d in combo for k, v in d.items()} for combo in itertools.product(*axes)]


def _apply_conditionals(spec: SweepSpec, base: RunConfig, points: list[dict]) -> list[dict]:
    for k, axis in spec.grid.items():
        if not isinstance(axis, ConditionalAxis):
            continue
        out = []
        for p in points:
            if all(value_matches(lookup(base, p, ck), cv) for ck, cv in axis.when.items()):
                out += [{**p, k: v} for v in axis.values]
            else:
                out.append(p)
        points = out
    return points


def _matches(point: dict[str, Any], exclude: dict[str, Any]) -> bool:
    return all(k in point and value_matches(point[k], v) for k, v in exclude.items())
