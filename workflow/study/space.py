"""The `optuna.space` block against the run config: every problem up front (`check_space`) and define-by-run
sampling in YAML order (`suggest`). (The grid sampler's finite lists: factory.grid_search_space.)"""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING, Any

import optuna
from pydantic import ValidationError

from workflow.config import RLConfig, RunConfig
from workflow.engine_api.registry import ENGINES
from workflow.strict import format_validation_error, value_types
from workflow.study.factory import JOURNAL_SUFFIXES, check_options, grid_search_space
from workflow.study.objective import OBJECTIVES
from workflow.sweep.study_spec import BudgetObjective, OptunaSpec, Param, SQLObjective
from workflow.sweep.keys import (apply, check_key, leaf_annotation, lookup, options, same, unmet_condition,
                                 value_matches)

if TYPE_CHECKING:  # the sweep's expansion calls check_space with its spec
    from workflow.sweep.spec import SweepSpec

_SCALAR = (str, int, float, bool, type(None))  # what optuna stores as a categorical choice
# Settings a run reads only under one value of another key (see workflow/stages.py): searching them in other
# trials changes no run, only Optuna's idea of it
_READ_ONLY_WHEN = {**{f"rl.{rule}.": ("rl.update", rule) for rule in RLConfig.rule_sections()},
                   **{f"rl.{mix}.": ("rl.mix", mix) for mix in RLConfig.mix_sections()},
                   **{f"engine.{t.settings}.": ("engine.name", n) for n, t in ENGINES.items() if t.settings}}


def suggest(trial: optuna.Trial, spec: OptunaSpec, base: dict[str, Any]) -> dict[str, Any]:
    """Ask `trial` for each key of the space in order, skipping a key whose `when` does not hold (read from the
    values suggested so far, else from base with the run-config defaults). Returns the dotted assignment."""
    cfg = RunConfig.model_validate(base)
    out: dict[str, Any] = {}
    for key, p in spec.space.items():
        if all(value_matches(lookup(cfg, out, ck), cv) for ck, cv in p.when.items()):
            out[key] = _suggest_one(trial, key, p)
    return out


def _suggest_one(trial: optuna.Trial, key: str, p: Param) -> Any:
    if p.type == "categorical":
        return trial.suggest_categorical(key, p.choices)
    if p.type == "int":
        return trial.suggest_int(key, int(p.low), int(p.high), step=int(p.step or 1), log=p.log)
    return trial.suggest_float(key, float(p.low), float(p.high), step=None if p.step is None else float(p.step),
                               log=p.log)


# ------------------------------------------------------------------------------------------------ checks
def check_space(spec: SweepSpec) -> list[str]:
    """Every problem of the sweep's `optuna:` block, as `optuna.<field>: reason` lines; [] when there is none."""
    opt = spec.optuna
    if opt is None:
        return []
    try:
        base = RunConfig.model_validate(spec.base)
    except ValidationError:
        base = None  # expand() reports the base's own errors; checks that need base values are skipped
    problems = _check_block(spec) + check_options(opt) + _check_pruning(spec, base)
    varied = {**{k: "grid" for k in spec.grid}, **{k: "zip" for g in spec.zip_groups for k in g}}
    for i, (key, p) in enumerate(opt.space.items()):
        where = f"optuna.space.{key}"
        bad_key = check_key(where, key)  # also says to use `seeds:` for the seed
        if bad_key:
            problems += bad_key
            continue
        if key in varied:
            problems.append(f"{where}: also set by {varied[key]}.{key}; a key is searched or swept, not both")
        if key.startswith("eval.") and key != "eval.every":
            # eval settings are not part of the RL run's id, and objectives score a trial by its runs' ids
            problems.append(f"{where}: trials that differ only in eval settings would share one RL run and read "
                            "each other's evaluations; search training settings, and compare eval settings with a "
                            "grid (each value its own setting in the summary and the report)")
            continue
        shape = _check_shape(where, p)
        if opt.sampler.name == "grid" and p.type == "float" and p.step is None:
            shape.append(f"{where}: the grid sampler needs a finite list of values; give this float a `step:` "
                         "(or make it int / categorical)")
        when = _check_when(where, key, p, opt, i, base)
        problems += shape + when
        if base is not None and not when:
            problems += _check_scope(where, key, p, opt, base)
            if not shape:
                problems += _check_values(where, key, p, opt, base, spec.base)
    if not problems and opt.sampler.name == "grid":
        size = math.prod(len(v) for v in grid_search_space(opt).values())
        if opt.n_trials > size:
            problems.append(f"optuna.n_trials: {opt.n_trials} trials but the grid has only {size} points; the "
                            "grid sampler would repeat points")
    return problems


def _check_pruning(spec: SweepSpec, base: RunConfig | None) -> list[str]:
    """A pruner reads each trial's evaluations between segments (pruning.py): its runs must split at the evaluated
    steps, so their engine must train in segments (any number of seeds: the pruner reads their mean)."""
    opt = spec.optuna
    if opt.pruner.name == "none" or base is None:
        return []
    problems = []
    engines = opt.space["engine.name"].choices if "engine.name" in opt.space and opt.space["engine.name"].choices \
        else [base.engine.name]
    for name in engines:
        engine = ENGINES.get(name)
        if not engine.trains_in_segments:
            problems.append(f"optuna.pruner: a trial is pruned between the segments of its runs, but engine {name} "
                            f"trains each run in one job ({engine.lacks.get('trains_in_segments', 'no segments')})")
        elif base.rl.segment_steps == 0 and "rl.segment_steps" not in opt.space:
            problems.append("optuna.pruner: a trial is pruned between the segments of its runs, but "
                            "base.rl.segment_steps 0 trains each run in one job; drop it (runs then split at their "
                            "evaluated steps)")
        elif base.rl.segment_steps is None and not engine.segments_by_default and "rl.segment_steps" not in opt.space:
            problems.append(f"optuna.pruner: a trial is pruned between the segments of its runs, but engine {name} "
                            "trains each run in one job unless rl.segment_steps asks: set base.rl.segment_steps "
                            "(its runs then also split at every evaluated step)")
    if "eval.every" not in opt.space and (base.eval.every is None or base.eval.every >= base.rl.steps):
        problems.append("optuna.pruner: pruning reads intermediate evals: set eval.every in base (a multiple of "
                        "rl.checkpoint_every below rl.steps)")
    return problems


def _check_block(spec: SweepSpec) -> list[str]:
    opt = spec.optuna
    problems = []
    used = [name for name, v in (("grid", spec.grid), ("zip", spec.zip_), ("exclude", spec.exclude)) if v]
    if used:
        problems.append(f"optuna: an Optuna sweep varies keys through optuna.space only; remove {', '.join(used)} "
                        "(fixed values go in base)")
    if not opt.space:
        problems.append("optuna.space: empty; name at least one key to search")
    if opt.direction is not None and opt.directions is not None:
        problems.append("optuna.directions: give `direction` or `directions`, not both")
    elif opt.directions is not None and not opt.directions:
        problems.append("optuna.directions: empty list; give at least one direction")
    if len(opt.study_directions) > 1:
        if opt.pruner.name != "none":
            problems.append(f"optuna.pruner: {opt.pruner.name} cannot prune a multi-objective study (optuna "
                            "reports no intermediate values for one); use `name: none`")
        if opt.sampler.name == "cmaes":
            problems.append("optuna.sampler: cmaes cannot run a multi-objective study; use tpe, gp or random")
    if isinstance(opt.objective, str) and opt.objective not in OBJECTIVES:
        known = ", ".join(sorted(OBJECTIVES)) or "none are registered yet"
        problems.append(f"optuna.objective: unknown objective {opt.objective!r} ({known}); or give {{sql: ...}}")
    elif isinstance(opt.objective, str) and len(opt.study_directions) > 1:
        problems.append(f"optuna.objective: the built-in {opt.objective!r} gives one value but there are "
                        f"{len(opt.study_directions)} directions; give {{sql: ...}} returning run_id and one value "
                        "column per direction")
    elif isinstance(opt.objective, BudgetObjective) and len(opt.study_directions) > 1:
        problems.append("optuna.objective.avg_at_k_within gives one value but there are "
                        f"{len(opt.study_directions)} directions; use {{sql: ...}}")
    elif isinstance(opt.objective, SQLObjective) and not opt.objective.sql.strip():
        problems.append("optuna.objective.sql: empty query")
    if opt.n_trials < 1:
        problems.append(f"optuna.n_trials: must be at least 1 (got {opt.n_trials})")
    if opt.in_flight < 1:
        problems.append(f"optuna.in_flight: must be at least 1 (got {opt.in_flight})")
    elif opt.in_flight > opt.n_trials >= 1:
        problems.append(f"optuna.in_flight: {opt.in_flight} trials at once but only n_trials = {opt.n_trials}")
    if opt.storage is not None and not opt.storage.endswith(JOURNAL_SUFFIXES) and "://" not in opt.storage:
        problems.append(f"optuna.storage: {opt.storage!r} is neither a storage URL (sqlite:///path.db, "
                        "postgresql://...) nor a journal file path ending .journal or .log")
    return problems


def _check_shape(where: str, p: Param) -> list[str]:
    """The distribution on its own: the fields its type needs, and bounds Optuna would refuse."""
    if p.type == "categorical":
        out = []
        if not isinstance(p.choices, list) or not p.choices:
            out.append(f"{where}: a categorical needs a non-empty `choices:` list")
        elif not all(isinstance(c, _SCALAR) for c in p.choices):
            out.append(f"{where}: choices must be scalars (string, number, bool, null), got {p.choices}")
        elif len({repr(c) for c in p.choices}) != len(p.choices):
            out.append(f"{where}: repeated choice in {p.choices}")
        extra = [f for f in ("low", "high", "step") if getattr(p, f) is not None] + (["log"] if p.log else [])
        if extra:
            out.append(f"{where}: {', '.join(extra)}: not for a categorical; list its values in `choices:`")
        return out
    if p.choices is not None:
        return [f"{where}: `choices:` applies to type categorical only; a {p.type} takes low and high"]
    if p.low is None or p.high is None:
        return [f"{where}: a {p.type} needs both `low:` and `high:`"]
    if not all(math.isfinite(v) for v in (p.low, p.high, p.step or 1)):
        return [f"{where}: low, high and step must be finite numbers"]
    if p.type == "int":
        frac = [f"{f}={v!r}" for f in ("low", "high", "step") if (v := getattr(p, f)) is not None
                and not isinstance(v, int)]
        if frac:
            return [f"{where}: an int's bounds and step must be integers (got {', '.join(frac)})"]
    if p.low > p.high:
        return [f"{where}: low ({p.low}) is greater than high ({p.high})"]
    if p.step is not None and p.step <= 0:
        return [f"{where}: step must be positive (got {p.step})"]
    if p.log and p.step is not None:
        return [f"{where}: log and step cannot be combined (a log scale is sampled without steps)"]
    if p.log and p.low <= 0:
        return [f"{where}: log needs low > 0 (got {p.low})"]
    if p.step is not None:
        n = (p.high - p.low) / p.step
        if abs(n - round(n)) > 1e-9 * max(1.0, abs(n)):  # optuna would quietly lower high to the last step
            return [f"{where}: high - low ({p.high - p.low:g}) is not a multiple of step ({p.step}); high would "
                    "never be sampled"]
    return []


def _check_when(where: str, key: str, p: Param, opt: OptunaSpec, index: int, base: RunConfig | None) -> list[str]:
    out = []
    keys = list(opt.space)
    for ck, cv in p.when.items():
        w = f"{where}.when.{ck}"
        bad_key = check_key(w, ck)
        if bad_key:
            out += bad_key
        elif ck in opt.space and keys.index(ck) >= index:
            which = "this same entry" if ck == key else "a later entry"
            out.append(f"{w}: {ck} is sampled by {which} of optuna.space; a condition can only read keys listed "
                       "before it")
        elif reason := unmet_condition(ck, cv, f"optuna.space.{ck}" if ck in opt.space else None,
                                       partial(_can_be, opt, ck, base=base), base, how="searched"):
            out.append(f"{w}: {reason}, so {key} would never be sampled")
    return out


def _check_scope(where: str, key: str, p: Param, opt: OptunaSpec, base: RunConfig) -> list[str]:
    """A key the run reads only under one value of a gate key must be searched only in trials with that value."""
    for prefix, (gate, needed) in _READ_ONLY_WHEN.items():
        if not key.startswith(prefix):
            continue
        if gate in p.when:
            values = options(p.when[gate])
        elif gate in opt.space and opt.space[gate].type == "categorical":
            gp = opt.space[gate]
            values = list(gp.choices or []) + ([lookup(base, {}, gate)] if gp.when else [])
        elif gate in opt.space:
            values = []  # a gate searched as a number is reported by its own value checks
        else:
            values = [lookup(base, {}, gate)]
        other = [v for v in values if not same(v, needed)]
        if other:
            return [f"{where}: the run reads {key} only when {gate} is {needed}, but it would be searched with "
                    f"{gate} = {other[0]!r} too, where it changes nothing; add `when: {{{gate}: {needed}}}`"]
    return []


def _check_values(where: str, key: str, p: Param, opt: OptunaSpec, base: RunConfig,
                  base_dict: dict[str, Any]) -> list[str]:
    """The run config must accept the key's extreme values (or each choice), in a trial where its `when` holds."""
    if p.type == "float" and _integer_field(key):
        return [f"{where}: {key} takes whole numbers; search it with type int"]
    witness = {ck: next(v for v in options(cv) if _holds(opt, ck, v, base)) for ck, cv in p.when.items()}
    probes = [("choice", c) for c in p.choices] if p.type == "categorical" else [("low", p.low), ("high", p.high)]
    out = []
    for label, value in probes:
        try:
            RunConfig.model_validate(apply(base_dict, {**witness, key: value}))
        except ValidationError as e:
            out += [f"{where}: {label} {value!r} is rejected: {line}" for line in format_validation_error(e)]
    return out


def _holds(opt: OptunaSpec, key: str, value: Any, base: RunConfig) -> bool:
    return _can_be(opt, key, value, base) if key in opt.space else same(lookup(base, {}, key), value)


def _can_be(opt: OptunaSpec, key: str, value: Any, base: RunConfig | None) -> bool:
    """Whether the searched `key` can have `value` in some trial: one of its values, or its base value when a
    `when` of its own can leave it unsampled."""
    p = opt.space[key]
    if p.when and base is not None and same(lookup(base, {}, key), value):
        return True
    if p.type == "categorical":
        return any(same(c, value) for c in p.choices or [])
    try:
        v = float(value)
    except (TypeError, ValueError):
        return False
    if p.low is None or p.high is None or not p.low <= v <= p.high:
        return False
    step = p.step or (1 if p.type == "int" else None)
    if step is None:
        return True
    n = (v - p.low) / step
    return abs(n - round(n)) < 1e-9 * max(1.0, abs(n))


def _integer_field(key: str) -> bool:
    """Whether the run-config leaf at `key` is declared as an int (optionally None), so fractions are refused."""
    args = value_types(leaf_annotation(key))
    return all(a is int or a is type(None) for a in args) and int in args

