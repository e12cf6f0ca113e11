"""Dotted run-config keys (`rl.gxpo.K`), as sweep files, grid points and Optuna search spaces name them: check a
key against the RunConfig schema, set keys into a config dict, read a key's value, compare values the way YAML
writes them."""

from __future__ import annotations

import copy
import difflib
from typing import Any, Callable

from pydantic import BaseModel

from workflow.identity import canonical_json
from workflow.config import RunConfig


def check_key(where: str, key: str) -> list[str]:
    """A dotted key must name a leaf of RunConfig; say which part is wrong and suggest the closest name."""
    problem = key_problem(key)
    return [f"{where}: {problem}"] if problem else []


def key_problem(key: str) -> str | None:
    """Why the dotted `key` names no leaf of RunConfig (the wrong part and the closest name), or None."""
    if key == "seed":
        return "use the top-level `seeds:` list to vary the seed"
    model: type[BaseModel] = RunConfig
    parts = key.split(".")
    for i, part in enumerate(parts):
        fields = model.model_fields
        if part not in fields:
            scope = ".".join(parts[:i]) or "the run config"
            close = difflib.get_close_matches(part, fields, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f" (known: {', '.join(fields)})"
            return f"unknown key '{part}' in {scope}{hint}"
        ann = fields[part].annotation
        is_model = isinstance(ann, type) and issubclass(ann, BaseModel)
        if i < len(parts) - 1 and not is_model:
            return f"'{'.'.join(parts[:i + 1])}' is a value, not a section"
        if i == len(parts) - 1 and is_model:
            return f"'{key}' is a section; vary one of its keys ({', '.join(ann.model_fields)})"
        if is_model:
            model = ann
    return None


def leaf_annotation(key: str) -> Any:
    """The declared type of the RunConfig leaf a (checked) dotted key names."""
    model: type[BaseModel] = RunConfig
    *parents, leaf = key.split(".")
    for part in parents:
        model = model.model_fields[part].annotation
    return model.model_fields[leaf].annotation


def apply(base: dict[str, Any], assignment: dict[str, Any]) -> dict[str, Any]:
    """A copy of the config dict `base` with every dotted key of `assignment` set (sections created as needed)."""
    cfg = copy.deepcopy(base)
    for key, value in assignment.items():
        node = cfg
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return cfg


def lookup(base: RunConfig, point: dict[str, Any], key: str) -> Any:
    """The key's value in a grid point (or trial), else in the validated base config."""
    if key in point:
        return point[key]
    value: Any = base
    for part in key.split("."):
        value = getattr(value, part)
    return value


def same(a: Any, b: Any) -> bool:
    if a == b:
        return True
    try:  # YAML reads 1e-4 as a string; compare numbers as numbers
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def value_matches(actual: Any, wanted: Any) -> bool:
    """`when:` and `exclude:` semantics: `wanted` is one value or a list of accepted values."""
    return any(same(actual, w) for w in options(wanted))


def options(wanted: Any) -> list[Any]:
    return wanted if isinstance(wanted, list) else [wanted]


def unmet_condition(key: str, wanted: Any, varied_at: str | None, can_be: Callable[[Any], bool],
                    base: RunConfig | None, how: str = "varied") -> str | None:
    """Why a condition `{key: wanted}` (a `when:`, an `exclude:` entry) holds nowhere, or None. `varied_at` names
    where the sweep varies `key` (None: it does not, so it keeps its value in `base`), `can_be(v)` says whether
    it takes the value v there; `how` is how the sweep varies keys, for the message ("varied", "searched")."""
    if varied_at is not None:
        return None if any(can_be(v) for v in options(wanted)) else \
            f"{key} never takes the value {wanted!r} (see {varied_at})"
    value = None if base is None else lookup(base, {}, key)
    if base is None or value_matches(value, wanted):
        return None
    return f"{key} is not {how} and base gives it {value!r}, not {wanted!r}"


def format_value(v: Any) -> str:
    return canonical_json(v) if isinstance(v, (dict, list)) else str(v)


def format_point(point: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in point.items()) + "}"
