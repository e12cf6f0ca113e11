"""Sweep expansion: grid x zip (+ conditional axes) - excludes, x seeds -> validated Run records.

Identity is per stage (workflow/stages.py): the SFT job is keyed by engine + model + task + sft only, so RL runs
that differ in RL settings or RL seed share one SFT job; an RL run is keyed by its SFT id + its RL settings +
seed; an eval by its RL id + eval settings, so changing eval settings never retrains anything.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from workflow.benchmarks.graders import rescores
from workflow.config import RunConfig
from workflow.engine_api.registry import traits
from workflow.engine_api.traits import EngineTraits
from workflow.results.membership import Member
from workflow.segments import segment_ends
from workflow.eval.plan import eval_groups, eval_jobs
from workflow.stages import STAGES, Ids, stage_of
from workflow.registry import load_object
from workflow.strict import format_validation_error
from workflow.identity import canonical_json, id_of_json, stable_id
from workflow.sweep.keys import (apply, check_key, format_point, format_value, key_problem, lookup, same,
                                 unmet_condition, value_matches)
from workflow.sweep import expansion_cache
from workflow.sweep.passed_checks import passed_before, remember_passed
from workflow.sweep.design_spec import BASELINE
from workflow.sweep.families import families
from workflow.sweep.spec import BLOCK_CHECKS, ConditionalAxis, SweepError, SweepSpec, read_spec


@dataclass(frozen=True)
class Run:
    """One data -> SFT -> RL -> eval chain. `run_id` is the RL stage's id: the id every table uses for the run."""

    config: RunConfig
    assignment: dict[str, Any]  # the dotted keys this grid point set (seed included)
    # Stage.id_field -> this run's id of that stage, for every declared stage (None: the run has no such stage)
    ids: dict[str, str | None]
    # the canonical JSON of stage_config(stage) that each of the run's stage ids hashes, kept: it is what their jobs
    # are handed (a 10,000-run sweep would otherwise dump 20,000 configs again while Snakemake plans)
    stage_json: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @cached_property
    def segment_ends(self) -> list[int]:
        """The steps its RL segment jobs end at (workflow/segments.py)."""
        return segment_ends(self.config)

    def id_of(self, stage: str) -> str | None:
        """This run's id of `stage` (None: the run has no such stage, e.g. no SFT)."""
        return self.ids[stage_of(stage).id_field]

    @property
    def run_id(self) -> str:
        return self.ids["run_id"]

    @property
    def eval_id(self) -> str:
        return self.ids["eval_id"]

    @property
    def sft_id(self) -> str | None:
        return self.ids["sft_id"]

    @property
    def pretrain_id(self) -> str | None:
        """The pretrain stage of a run from a capable base (config.pretrain)."""
        return self.ids["pretrain_id"]

    @property
    def data_id(self) -> str | None:
        """The data stage of a `datasets` task."""
        return self.ids["data_id"]

    @property
    def overlap_id(self) -> str | None:
        """The data's check against this run's evaluated benchmarks (None: nothing to check)."""
        return self.ids["overlap_id"]

    @cached_property
    def label(self) -> str:
        """The point's settings without the seed: runs with the same label are replicates (made once: `rlsweep
        watch` asks it of each run several times a refresh)."""
        return " ".join(f"{k}={format_value(v)}" for k, v in self.assignment.items() if k != "seed") or "base"

    @property
    def method(self) -> str:
        return self.config.rl.method

    def stage_config(self, stage: str) -> dict[str, Any]:
        """The config of this run's `stage` job (its id is the hash of it), read back from the JSON kept for it."""
        return json.loads(self.stage_config_json(stage))

    def stage_config_json(self, stage: str) -> str:
        """canonical_json of the stage's config: the config a stage job is handed, hashing to its id (kept for every
        stage the run has when it was made; made again only for one it has not)."""
        kept = self.stage_json.get(stage)
        if kept is not None:
            return kept
        return canonical_json(stage_of(stage).config(self.config, self.config.model_dump(mode="json"),
                                                       _ids_read(self.ids)))

    @property
    def eval_jobs(self) -> list[tuple[int, str]]:
        """(RL step, benchmark group) of each of this run's eval jobs."""
        return eval_jobs(self.config)

    def rescore_jobs(self, extra: list[str] = ()) -> list[tuple[int, str, str]]:
        """(RL step, benchmark group, grader) of each rescore job (rule rescore): every eval job x every grader of
        eval.graders and `extra` that judges one of the group's benchmarks and is not its own grader."""
        names = list(dict.fromkeys([*self.config.eval.graders, *extra]))
        if not names:
            return []
        groups = eval_groups(self.config.eval)
        return [(step, group, g) for step, group in self.eval_jobs for g in names
                if any(rescores(g, b) for b in groups[group])]

    @property
    def start(self) -> str | None:
        """The model this run's RL starts from, as step-0 evaluations (eval.at_start) and the report name it:
        `SFT <sft_id>`, else `base <pretrain_id>` (a pretrained base), else verl's model_path; None for the local
        engine without either (a random initialisation per seed, nothing to evaluate)."""
        if self.sft_id is not None:
            return f"SFT {self.sft_id}"
        if self.pretrain_id is not None:
            return f"base {self.pretrain_id}"
        return traits(self.config.engine.name).start_model(self.config)

    @property
    def start_name(self) -> str | None:
        """How the report names this run's starting point: Run.start and the eval settings this point sets, so that
        step-0 evaluations of one model under different eval settings (a grid over eval.temperature) stay apart."""
        if self.start is None:
            return None
        evals = [f"{k}={format_value(v)}" for k, v in self.assignment.items() if k.startswith("eval.")]
        return " ".join([self.start, *evals])

    @property
    def start_key(self) -> str | None:
        """What this run's step-0 evaluation evaluates, and how: its starting model (Run.start) under its eval
        settings (the eval stage's config but the run). Runs with the same key get the same step-0 samples (the
        eval seed is a setting)."""
        if self.start is None:
            return None
        ev = self.stage_config("eval")
        del ev["run_id"]
        return stable_id({"start": self.start, "eval": ev})


class PointError(ValueError):
    """A grid point or trial whose settings do not make valid runs: `problems` are `key: reason` lines for the
    first `assignment` (the point with its seed) that failed."""

    def __init__(self, problems: list[str], assignment: dict[str, Any]):
        self.problems, self.assignment = problems, assignment
        super().__init__("; ".join(problems))


def runs_for(spec: SweepSpec, point: dict[str, Any], shared: dict[str, str] | None = None,
             seeds: list[int] | None = None) -> list[Run]:
    """The runs of one grid point (or one Optuna trial's parameters): the point applied to the sweep's base, once
    per seed (`seeds`, default the sweep's: its list, or a design's first round), validated (and checked by verl's own code on the verl engine).

    The point is validated once, with its first seed: every check judges the RL seed by its type alone (a bounded
    int, which `seeds:` already validated), so each other seed's config is the first one's with its seed replaced,
    sharing the first one's sections (immutable). A 100-seed grid point then costs one validation, not 100
    (tests/unit/sweep/test_expand_seeds.py holds each run equal to its own full validation). `shared`: the stage
    JSON texts made so far, so runs whose stage configs are equal hold one string (the SFT job's of a 10,000-run
    sweep: once, not 10,000 times, in memory and in the expansion's cache file)."""
    shared = {} if shared is None else shared
    seeds = spec.seed_list if seeds is None else seeds
    first = {**point, "seed": seeds[0]}
    try:
        cfg = RunConfig.model_validate(apply(spec.base, first))
    except ValidationError as e:
        raise PointError(format_validation_error(e), first) from None
    # a point (or trial) that names a dataset file of its own; then the engine's heavy checks
    problems = cfg.file_problems() or _engine_problems(cfg)
    if problems:
        raise PointError(problems, first)
    dumped = cfg.model_dump(mode="json")
    runs = []
    for seed in seeds:
        seeded = cfg if seed == cfg.seed else cfg.model_copy(update={"seed": seed})
        ids, texts = _stage_ids(seeded, {**dumped, "seed": seed})
        texts = {stage: shared.setdefault(text, text) for stage, text in texts.items()}
        runs.append(Run(config=seeded, assignment={**point, "seed": seed}, ids=ids, stage_json=texts))
    return runs


def _engine_problems(cfg: RunConfig) -> list[str]:
    """The engine's heavy checks of a run (verl's own, on the translated config), skipped for a config that passed
    them on this machine with this code and these packages (workflow/sweep/passed_checks.py)."""
    engine = traits(cfg.engine.name)
    if type(engine).sweep_problems is EngineTraits.sweep_problems:  # no heavy checks: nothing worth remembering
        return []
    # The seed is the one setting the checks judge by its type alone (a bounded int, already validated): the seeds
    # of one setting share a marker, so a sweep of S settings x N seeds pays the checks S times, not S x N.
    # (Its engine section names the engine.)
    text = cfg.model_copy(update={"seed": 0}).model_dump_json()
    if passed_before(cfg.engine.name, text):
        return []
    problems = engine.sweep_problems(cfg)
    if not problems:
        remember_passed(cfg.engine.name, text)
    return problems


def _stage_ids(cfg: RunConfig, d: dict[str, Any]) -> tuple[dict[str, str | None], dict[str, str]]:
    """A run's id of every stage (None where it has none) and the canonical JSON each id hashes: the stages in
    declaration order (workflow/stages.py STAGES), each config naming the ids of the stages before it. `d`:
    cfg.model_dump(mode="json"), which the stages' configs read (never change)."""
    ids: dict[str, str | None] = {}
    texts = {}
    for stage in STAGES.values():
        if not stage.present(cfg):
            ids[stage.id_field] = None
            continue
        text = canonical_json(stage.config(cfg, d, _ids_read(ids)))
        ids[stage.id_field], texts[stage.name] = id_of_json(text), text
    return ids, texts


_ID_FIELDS = frozenset(Ids.__dataclass_fields__)


def _ids_read(ids: dict[str, str | None]) -> Ids:
    """What a stage's config may read of a run's ids (a stage declared after the ones Ids names reads those)."""
    return Ids(**{k: v for k, v in ids.items() if k in _ID_FIELDS})


@dataclass
class Sweep:
    name: str
    path: str
    spec: SweepSpec
    runs: list[Run]
    by_run_id: dict[str, Run] = field(init=False)
    # stage -> stage id -> the runs that have that job (a shared SFT job: every run starting from it)
    by_stage: dict[str, dict[str, list[Run]]] = field(init=False)

    def __post_init__(self) -> None:
        self.by_run_id, self.by_stage = {}, {name: {} for name in STAGES}
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
            for name, stage in STAGES.items():
                stage_id = r.ids[stage.id_field]
                if stage_id is not None:
                    self.by_stage[name].setdefault(stage_id, []).append(r)

    def jobs(self, stage: str) -> dict[str, list[Run]]:
        """Stage id -> the runs that share that job, for every job of `stage` the sweep plans."""
        return self.by_stage[stage_of(stage).name]

    def config_json(self, stage: str, stage_id: str) -> str:
        """The canonical config a job is handed (and its id hashes)."""
        return self.by_stage[stage][stage_id][0].stage_config_json(stage)

    def configs(self, stage: str) -> dict[str, dict]:
        """Stage id -> the config of each job of `stage`."""
        return {i: runs[0].stage_config(stage) for i, runs in self.jobs(stage).items()}

    def upstream(self, stage: str, stage_id: str) -> dict[str, str | list[str]]:
        """A job's option -> the id(s) of the other stages' jobs it reads (workflow/stages.py `Option.upstream`):
        of every run that has this job, each run's id of that stage; a `many` option takes all of them (a shared SFT
        job enforces the overlap checks of every run starting from it), any other exactly one (its id is in the
        job's config, so the runs sharing the job agree on it). Options of stages the runs do not have are left
        out."""
        runs = self.by_stage[stage][stage_id]
        out: dict[str, str | list[str]] = {}
        for option in stage_of(stage).upstream:
            field_ = stage_of(option.upstream).id_field
            found = sorted({i for r in runs if (i := r.ids[field_]) is not None})
            if not found:
                continue
            if not option.many and len(found) > 1:  # a stage config that does not name its upstream id
                raise ValueError(f"{stage} job {stage_id}: its runs read different {option.upstream} jobs "
                                 f"({', '.join(found)}) through --{option.name}, which takes one")
            out[option.name] = found if option.many else found[0]
        return out

    def segment_ends(self, stage: str, stage_id: str) -> list[int]:
        """The steps a segmented stage's job ends at (workflow/segments.py): of every run that has it, so runs that
        share an RL run but evaluate other steps each find their steps' segments."""
        runs = self.by_stage[stage][stage_id]
        if len(runs) == 1:
            return runs[0].segment_ends
        return sorted({end for r in runs for end in r.segment_ends})

    def segment_of(self, stage: str, stage_id: str) -> dict[int, int]:
        """Each evaluated step of a segmented stage's job that no segment ends at -> the end of the segment whose
        checkpoints hold it (a run trained in one job: its last step). Empty for a chain that ends at every
        evaluated step, as runs on the local engine with segments do: each evaluation then waits for its own step's
        segment."""
        ends = self.segment_ends(stage, stage_id)
        steps = {s for r in self.by_stage[stage][stage_id] for s, _ in r.eval_jobs if s > 0}
        return {s: next(e for e in ends if e >= s) for s in sorted(steps.difference(ends))}

    def label(self, stage: str, stage_id: str) -> str:
        """A labelled stage's job's label: its run's (the last run of the sweep with this id, like by_run_id)."""
        return self.by_stage[stage][stage_id][-1].label

    def members(self) -> list[Member]:
        """Every stage job the sweep plans, as its membership records it (results/membership.py): one per job of
        each stage, and for a labelled stage (rl, eval) one per run under the run's label."""
        out = []
        for name, stage in STAGES.items():
            jobs = self.by_stage[name]
            if stage.labelled:
                out += [Member(name, i, r.label) for i, runs in jobs.items() for r in runs]
            else:
                out += [Member(name, i) for i in jobs]
        return out

    def start_sources(self) -> dict[str, Run]:
        """Eval id -> the run whose step-0 evaluations that run copies: of the runs that evaluate the same starting
        checkpoint the same way (Run.start_key), the first in the sweep evaluates it and the others copy its rows
        (one eval job per start and benchmark group instead of one per run; a study's runs only ever grow, so the
        first stays the first)."""
        return self.starts()[1]

    def starts(self) -> tuple[list[Run], dict[str, Run]]:
        """(the runs that evaluate their start themselves, start_sources()): every run with step-0 evaluations is
        in exactly one of the two."""
        first: dict[str, Run] = {}
        sources = {}
        for r in self.runs:
            if not r.config.eval.at_start or r.start_key is None:  # (in this order: a start key costs ~0.1 ms)
                continue
            source = first.setdefault(r.start_key, r)
            if source is not r:
                sources[r.eval_id] = source  # (not the run id: runs that differ in eval settings share it)
        return list(first.values()), sources


def load_sweep(path: str | Path) -> Sweep:
    spec = read_spec(path)
    big = spec.optuna is None and expansion_cache.worth_caching(_product_size(spec) * len(spec.seed_list))
    runs = expansion_cache.load(spec) if big else None  # (workflow/sweep/expansion_cache.py)
    if runs is None:
        runs = expand(spec, path)
        if big:
            expansion_cache.save(spec, runs)
    return Sweep(name=spec.name, path=str(path), spec=spec, runs=runs)


# ----------------------------------------------------------------------------------------------------------------
# every run is validated and hashed when the sweep loads (about a millisecond each): a bigger grid is a mistake or
# a job for an `optuna:` block, and refusing it from its size keeps a typo'd grid from filling memory
MAX_RUNS = 10_000


def expand(spec: SweepSpec, path: str | Path = "<sweep>") -> list[Run]:
    base, problems = _check_base(spec)
    for where, key in _all_dotted_keys(spec):
        problems += check_key(where, key)
    problems += _check_lists(spec) + _check_places(spec) + _check_excludes(spec)
    if base is not None:
        problems += _check_conditions(spec, base)
    if spec.optuna is not None:
        problems += load_object(BLOCK_CHECKS["optuna"])(spec)  # (the study's floor; Optuna only for such sweeps)
    if problems:
        raise SweepError(path, problems)
    if spec.optuna is not None:
        return []  # an Optuna sweep's runs are its trials, made when the study asks for them

    size = _product_size(spec)
    if size * len(spec.seed_list) > MAX_RUNS:
        raise SweepError(path, [_too_many("grid", size, spec)])
    points, problems = _apply_conditionals(spec, base, _product(spec))
    if not problems:
        points, problems = _without_excluded(spec, points)
    if problems:
        raise SweepError(path, problems)

    runs: list[Run] = []
    seen: dict[tuple[str, str], dict] = {}
    shared: dict[str, str] = {}
    for point in points:
        try:
            point_runs = runs_for(spec, point, shared)
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
    labels = sorted({r.label for r in runs})
    if spec.report.baseline is not None and spec.report.baseline not in labels:
        problems.append(f"report.baseline: {spec.report.baseline!r} is none of the sweep's settings "
                        f"({', '.join(repr(label) for label in labels)})")
    if spec.design is not None and not problems:
        problems += _check_design(spec, runs)
    if problems:
        raise SweepError(path, problems)
    return runs


def _check_design(spec: SweepSpec, runs: list[Run]) -> list[str]:
    """Seeds on demand: what is compared must make pairs (workflow/sweep/families.py forms them)."""
    design = spec.design
    if design.compare == BASELINE:
        if spec.report.baseline is None:
            return ["seeds.compare: `baseline` compares every setting against report.baseline, which is not set"]
    else:
        varied = _varied(spec)
        if design.compare not in varied:
            named = ", ".join(varied) or "none: the sweep has one setting"
            return [f"seeds.compare: {design.compare!r} is not a key the sweep varies (its grid / zip keys: {named}); "
                    "or `baseline` (every setting against report.baseline)"]
        where, values = varied[design.compare]
        if len(values) < 2:
            return [f"seeds.compare: {design.compare!r} has one value ({where}: {values}): a comparison needs two "
                    "or more"]
    found = families(spec, runs)
    if not any(f.pairs for f in found):
        return [f"seeds.compare: {design.compare!r} makes no pair of settings (every family has one setting: the "
                "settings that differ in it differ in another key too, e.g. one a conditional axis sets for some "
                "values only); `compare: baseline` compares every setting with report.baseline"]
    return []


def _check_base(spec: SweepSpec) -> tuple[RunConfig | None, list[str]]:
    """The validated base (None when it is not valid) and its problems; an unknown key gets the closest name."""
    try:
        base = RunConfig.model_validate(spec.base)
    except ValidationError as e:
        return None, format_validation_error(e, prefix="base", explain_unknown=key_problem)
    return base, [f"base.{line}" for line in base.file_problems()]


def _zip_where(spec: SweepSpec, i: int) -> str:
    return "zip" if isinstance(spec.zip_, dict) else f"zip[{i}]"


def _all_dotted_keys(spec: SweepSpec):
    for k, axis in spec.grid.items():
        yield f"grid.{k}", k
        if isinstance(axis, ConditionalAxis):
            for ck in axis.when:
                yield f"grid.{k}.when.{ck}", ck
    for i, group in enumerate(spec.zip_groups):
        for k in group:
            yield f"{_zip_where(spec, i)}.{k}", k
    for i, ex in enumerate(spec.exclude):
        for k in ex:
            yield f"exclude[{i}].{k}", k


def _places(spec: SweepSpec) -> list[tuple[str, str, list[Any]]]:
    """(where, key, values) of every key the sweep varies, in file order: grid axes, then zip groups."""
    out = [(f"grid.{k}", k, axis.values if isinstance(axis, ConditionalAxis) else axis)
           for k, axis in spec.grid.items()]
    for i, group in enumerate(spec.zip_groups):
        out += [(f"{_zip_where(spec, i)}.{k}", k, values) for k, values in group.items()]
    return out


def _varied(spec: SweepSpec) -> dict[str, tuple[str, list[Any]]]:
    """Key -> (where, values) of its first place (a key in two places is reported by _check_places)."""
    out: dict[str, tuple[str, list[Any]]] = {}
    for where, key, values in _places(spec):
        out.setdefault(key, (where, values))
    return out


def _check_lists(spec: SweepSpec) -> list[str]:
    problems = []
    for k, axis in spec.grid.items():
        values = axis.values if isinstance(axis, ConditionalAxis) else axis
        if not values:
            problems.append(f"grid.{k}: empty list; a grid axis needs at least one value")
    for i, group in enumerate(spec.zip_groups):
        where = _zip_where(spec, i)
        lengths = {k: len(v) for k, v in group.items()}
        if any(n == 0 for n in lengths.values()):
            problems.append(f"{where}: empty list in {lengths}")
        if len(set(lengths.values())) > 1:
            problems.append(f"{where}: lists must have the same length, got "
                            + ", ".join(f"{k}: {n}" for k, n in lengths.items()))
    return problems


def _check_places(spec: SweepSpec) -> list[str]:
    """A key varied in two places would have one of them silently win in every point."""
    first: dict[str, str] = {}
    problems = []
    for where, key, _ in _places(spec):
        if key in first:
            problems.append(f"{where}: {key} is also varied by {first[key]}; vary a key in one place only")
        first.setdefault(key, where)
    return problems


def _check_excludes(spec: SweepSpec) -> list[str]:
    """An exclude entry matches grid points by the keys they vary: one naming a key no axis varies, or a value the
    key's axis never takes, excludes nothing."""
    varied = _varied(spec)
    problems = []
    for i, ex in enumerate(spec.exclude):
        for k, v in ex.items():
            if key_problem(k):
                continue  # reported with its key
            if k not in varied:
                problems.append(f"exclude[{i}].{k}: {k} is not varied by grid or zip, so this entry matches no "
                                "grid point")
            elif reason := unmet_condition(k, v, varied[k][0], partial(_one_of, varied[k][1]), None):
                problems.append(f"exclude[{i}].{k}: {reason}, so this entry matches no grid point")
    return problems


def _check_conditions(spec: SweepSpec, base: RunConfig) -> list[str]:
    """A conditional axis whose `when` can never hold varies nothing: the check an Optuna space's `when` gets.
    Conditional axes apply in grid order, so a condition reads plain axes, zip and earlier conditional axes."""
    varied = _varied(spec)
    conditional = [k for k, axis in spec.grid.items() if isinstance(axis, ConditionalAxis)]
    problems = []
    for k in conditional:
        for ck, cv in spec.grid[k].when.items():
            w = f"grid.{k}.when.{ck}"
            if key_problem(ck) or key_problem(k):
                continue  # reported with its key
            if ck in conditional and conditional.index(ck) >= conditional.index(k):
                which = "this same axis" if ck == k else "a later conditional axis"
                problems.append(f"{w}: {ck} is varied by {which} of grid; a condition can only read keys varied "
                                "before it (plain axes, zip, earlier conditional axes)")
                continue
            where, values = varied.get(ck, (None, []))
            if ck in conditional:  # where its own condition does not hold, it keeps its base value
                values = [*values, lookup(base, {}, ck)]
            if reason := unmet_condition(ck, cv, where, partial(_one_of, values), base):
                problems.append(f"{w}: {reason}, so {k} would never be varied")
    return problems


def _one_of(values: list[Any], value: Any) -> bool:
    return any(same(v, value) for v in values)


def _product_size(spec: SweepSpec) -> int:
    """The number of points of the plain axes and zip groups, without making them (zip lists are checked equal)."""
    sizes = [len(axis) for axis in spec.grid.values() if not isinstance(axis, ConditionalAxis)]
    return math.prod(sizes + [len(next(iter(group.values()))) for group in spec.zip_groups if group])


def _too_many(where: str, points: int, spec: SweepSpec) -> str:
    return (f"{where}: {points:,} grid points x {len(spec.seed_list)} seed(s) = {points * len(spec.seed_list):,} runs (before "
            f"exclude); a sweep may make at most {MAX_RUNS:,} runs: split it, or search with an `optuna:` block")


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


def _apply_conditionals(spec: SweepSpec, base: RunConfig, points: list[dict]) -> tuple[list[dict], list[str]]:
    """Each conditional axis multiplies the points where its `when` holds; its size is checked before it does."""
    for k, axis in spec.grid.items():
        if not isinstance(axis, ConditionalAxis):
            continue
        holds = [all(value_matches(lookup(base, p, ck), cv) for ck, cv in axis.when.items()) for p in points]
        if not any(holds):  # each condition can hold (_check_conditions), but never all at once
            return points, [f"grid.{k}.when: its conditions never hold together in one grid point, so {k} would "
                            "never be varied"]
        size = len(points) + sum(holds) * (len(axis.values) - 1)
        if size * len(spec.seed_list) > MAX_RUNS:
            return points, [_too_many(f"grid.{k}", size, spec)]
        points = [q for p, h in zip(points, holds) for q in ([{**p, k: v} for v in axis.values] if h else [p])]
    return points, []


def _without_excluded(spec: SweepSpec, points: list[dict]) -> tuple[list[dict], list[str]]:
    """The points no exclude entry matches; an entry that matches no point is a mistake (_check_excludes says why
    when it can tell from one key)."""
    used = [False] * len(spec.exclude)
    kept = []
    for p in points:
        hits = [i for i, ex in enumerate(spec.exclude) if _matches(p, ex)]
        for i in hits:
            used[i] = True
        if not hits:
            kept.append(p)
    problems = [f"exclude[{i}]: matches no grid point (its values never occur together in one point)"
                for i, u in enumerate(used) if not u]
    if not kept:
        problems.append("exclude: every grid point is excluded; nothing to run")
    return kept, problems


def _matches(point: dict[str, Any], exclude: dict[str, Any]) -> bool:
    return all(k in point and value_matches(point[k], v) for k, v in exclude.items())
