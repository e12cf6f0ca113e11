"""Sweep expansion: grid x zip (+ conditional axes) - excludes, x seeds -> validated Run records.

Identity is per stage (see `Run.stage_config`): the SFT job is keyed by engine + model + task + sft only, so RL
runs that differ in RL settings or RL seed share one SFT job; an RL run is keyed by its SFT id + its RL settings
+ seed; an eval by its RL id + eval settings, so changing eval settings never retrains anything.
"""

from __future__ import annotations

import copy
import difflib
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from workflow.config import VERL_STAGE_FIELDS, RunConfig
from workflow.sweep.identity import canonical_json, stable_id
from workflow.sweep.spec import ConditionalAxis, SweepError, SweepSpec, format_validation_error, read_spec


@dataclass(frozen=True)
class Run:
    """One SFT -> RL -> eval chain. `run_id` is the RL stage's id: the id every table uses for the run."""

    config: RunConfig
    assignment: dict[str, Any]  # the dotted keys this grid point set (seed included)
    sft_id: str | None
    run_id: str
    eval_id: str

    @property
    def label(self) -> str:
        """The point's settings without the seed: runs with the same label are replicates."""
        return " ".join(f"{k}={_fmt(v)}" for k, v in self.assignment.items() if k != "seed") or "base"

    @property
    def method(self) -> str:
        return self.config.rl.update

    def stage_config(self, stage: str) -> dict[str, Any]:
        return stage_config(self.config, stage, sft_id=self.sft_id, run_id=self.run_id)

    @property
    def eval_jobs(self) -> list[tuple[int, str]]:
        """(RL step, benchmark group) of each of this run's eval jobs."""
        from workflow.eval.plan import eval_jobs
        return eval_jobs(self.config)


def stage_config(cfg: RunConfig, stage: str, *, sft_id: str | None = None, run_id: str | None = None) -> dict:
    """The part of a run's config that decides a stage's result; a stage's id is the hash of exactly this."""
    d = cfg.model_dump(mode="json")
    engine = {"name": d["engine"]["name"]}  # engine.verl only for verl runs, as sfpo/gxpo below
    if engine["name"] == "verl" and stage in VERL_STAGE_FIELDS:
        engine["verl"] = {k: d["engine"]["verl"][k] for k in VERL_STAGE_FIELDS[stage]}
    elif engine["name"] == "verl":
        engine = d["engine"]
    common = {"engine": engine, "task": d["task"]}
    if stage == "sft":
        return {**common, "model": d["model"], "sft": d["sft"]}
    if stage == "rl":
        # only the selected update rule's settings belong to the run: a GRPO run is the same run whatever
        # rl.sfpo.K says, so sweeping rl.sfpo.K over GRPO runs is reported as duplicate runs
        rl = {k: v for k, v in d["rl"].items() if k not in ("sfpo", "gxpo") or k == d["rl"]["update"]}
        return {**common, "model": d["model"], "rl": rl, "seed": d["seed"], "sft_id": sft_id}
    if stage == "eval":
        return {**common, "eval": d["eval"], "run_id": run_id}
    raise ValueError(f"unknown stage {stage!r}")


@dataclass
class Sweep:
    name: str
    path: str
    spec: SweepSpec
    runs: list[Run]
    by_run_id: dict[str, Run] = field(init=False)
    sft_configs: dict[str, dict] = field(init=False)

    def __post_init__(self) -> None:
        self.by_run_id, self.sft_configs = {}, {}
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
    for key in _all_dotted_keys(spec):
        problems += check_key(key)
    problems += _check_lists(spec)
    if spec.optuna is not None:
        from workflow.study.space import check_space  # it imports this module
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
        for seed in spec.seeds:
            assignment = {**point, "seed": seed}
            try:
                cfg = RunConfig.model_validate(_apply(spec.base, assignment))
            except ValidationError as e:
                problems += [f"{_where(assignment)}: {line}" for line in format_validation_error(e)]
                continue
            if cfg.engine.name == "verl":  # verl's own checks on the translated config, once per distinct run
                problem = _verl_problem(cfg)
                if problem:
                    problems.append(f"{_where(assignment)}: {problem}")
                    continue
            run = _make_run(cfg, assignment)
            key = (run.run_id, run.eval_id)
            if key in seen:
                problems.append(f"grid points {_fmt_point(seen[key])} and {_fmt_point(assignment)} expand to the "
                                f"same run {run.run_id}: a value repeats or equals another after validation")
                continue
            seen[key] = assignment
            runs.append(run)
    if problems:
        raise SweepError(path, problems)
    return runs


def _where(assignment: dict[str, Any]) -> str:
    return "grid point {" + ", ".join(f"{k}: {_fmt(v)}" for k, v in assignment.items()) + "}"


def _verl_problem(cfg: RunConfig) -> str | None:
    from workflow.engines.verl_config import VerlConfigError, validate
    try:
        validate(cfg)
    except VerlConfigError as e:
        return str(e)
    return None


def _make_run(cfg: RunConfig, assignment: dict[str, Any]) -> Run:
    sft_id = stable_id(stage_config(cfg, "sft")) if cfg.sft.enabled else None
    run_id = stable_id(stage_config(cfg, "rl", sft_id=sft_id))
    eval_id = stable_id(stage_config(cfg, "eval", run_id=run_id))
    return Run(config=cfg, assignment=assignment, sft_id=sft_id, run_id=run_id, eval_id=eval_id)


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


def check_key(where_and_key: tuple[str, str]) -> list[str]:
    """A dotted key must name a leaf of RunConfig; say which part is wrong and suggest the closest name."""
    where, key = where_and_key
    if key == "seed":
        return [f"{where}: use the top-level `seeds:` list to vary the seed"]
    model: type[BaseModel] = RunConfig
    parts = key.split(".")
    for i, part in enumerate(parts):
        fields = model.model_fields
        if part not in fields:
            scope = ".".join(parts[:i]) or "the run config"
            close = difflib.get_close_matches(part, fields, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f" (known: {', '.join(fields)})"
            return [f"{where}: unknown key '{part}' in {scope}{hint}"]
        ann = fields[part].annotation
        is_model = isinstance(ann, type) and issubclass(ann, BaseModel)
        if i < len(parts) - 1 and not is_model:
            return [f"{where}: '{'.'.join(parts[:i + 1])}' is a value, not a section"]
        if i == len(parts) - 1 and is_model:
            return [f"{where}: '{key}' is a section; vary one of its keys ({', '.join(ann.model_fields)})"]
        if is_model:
            model = ann
    return []


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
    return [_merge(combo) for combo in itertools.product(*axes)]


def _apply_conditionals(spec: SweepSpec, base: RunConfig, points: list[dict]) -> list[dict]:
    for k, axis in spec.grid.items():
        if not isinstance(axis, ConditionalAxis):
            continue
        out = []
        for p in points:
            if all(_value_matches(_lookup(base, p, ck), cv) for ck, cv in axis.when.items()):
                out += [{**p, k: v} for v in axis.values]
            else:
                out.append(p)
        points = out
    return points


def _lookup(base: RunConfig, point: dict[str, Any], key: str) -> Any:
    if key in point:
        return point[key]
    value: Any = base
    for part in key.split("."):
        value = getattr(value, part)
    return value


def _value_matches(actual: Any, wanted: Any) -> bool:
    options = wanted if isinstance(wanted, list) else [wanted]
    return any(_same(actual, w) for w in options)


def _same(a: Any, b: Any) -> bool:
    if a == b:
        return True
    try:  # YAML reads 1e-4 as a string; compare numbers as numbers
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _matches(point: dict[str, Any], exclude: dict[str, Any]) -> bool:
    return all(k in point and _value_matches(point[k], v) for k, v in exclude.items())


def _merge(dicts) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for d in dicts:
        out.update(d)
    return out


def _apply(base: dict[str, Any], assignment: dict[str, Any]) -> dict[str, Any]:
    cfg = copy.deepcopy(base)
    for key, value in assignment.items():
        node = cfg
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return cfg


def _fmt(v: Any) -> str:
    return canonical_json(v) if isinstance(v, (dict, list)) else str(v)


def _fmt_point(p: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {_fmt(v)}" for k, v in p.items()) + "}"
