"""Docs from the code: the configuration reference (docs/configuration.md) and the JSON Schema of sweep files
(docs/sweep.schema.json), generated from the pydantic models that validate a sweep, so neither can drift from what
rlsweep accepts; and what each engine can do (docs/engines.md, from its traits: workflow/engine_api/capabilities.py).
Every field carries its help as `Field(description=...)`, beside its type, default and bounds (the model TRL's
GRPOConfig follows); tests/unit/eval/test_reference.py fails when a field has none or a file is stale.

    python scripts/docs.py          # rewrite the three files
    python scripts/docs.py --check  # exit 1 if any is stale (what the test does)

The schema is what an editor needs to check and complete a sweep: `base` is a run config, `grid` / `zip` /
`exclude` / `optuna.space` take the dotted run-config keys (each listed, so an editor completes them).
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Iterator, Literal

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

DOCS = Path(__file__).resolve().parent.parent / "docs"
REFERENCE, SCHEMA, ENGINES_PAGE = DOCS / "configuration.md", DOCS / "sweep.schema.json", DOCS / "engines.md"


@dataclass(frozen=True)
class FieldDoc:
    """One key of a sweep file: where it is, what it takes, its default and what it means."""

    key: str  # dotted, as a sweep file writes it (`base.rl.sfpo.K` is `rl.sfpo.K` of the run config)
    type: str
    default: str
    description: str
    section: bool  # a mapping of keys of its own (documented under its key)


def models(model: type[BaseModel]) -> list[type[BaseModel]]:
    """The models a field's type names (through Optional, unions, lists, tuples, dict values)."""
    out: list[type[BaseModel]] = []

    def visit(t: Any) -> None:
        if isinstance(t, type) and issubclass(t, BaseModel):
            out.append(t)
        for arg in typing.get_args(t):
            visit(arg)
    visit(model)
    return out


def walk(model: type[BaseModel], prefix: str = "", seen: dict | None = None
         ) -> Iterator[tuple[type[BaseModel], str, str, FieldInfo]]:
    """(model, key, field name, field) for every field of `model` and of the models its fields name, depth first (a
    list's items are `key[]`). With `seen` (model -> its first key), a model met again is not walked again."""
    for name, info in model.model_fields.items():
        key = f"{prefix}{info.alias or name}"
        yield model, key, name, info
        ann = info.annotation
        for sub in models(ann):
            if seen is not None and sub in seen:
                continue
            where = _item_key(key, ann, sub)
            if seen is not None:
                seen[sub] = where
            yield from walk(sub, f"{where}.", seen)


def _item_key(key: str, ann: Any, sub: type[BaseModel]) -> str:
    """Where the model `sub` sits under the field `key` of type `ann`: the field itself, a list's items (`key[]`),
    a mapping's values (`key.<key>`)."""
    for t in (ann, *typing.get_args(ann)):
        origin = typing.get_origin(t)
        if origin in (list, tuple) and sub in models(t):
            return f"{key}[]"
        if origin is dict and sub in models(typing.get_args(t)[1]):
            return f"{key}.<key>"
    return key


def field_docs(model: type[BaseModel], prefix: str = "") -> list[FieldDoc]:
    """Each key once; a section whose model is documented under another key points there."""
    seen: dict[type[BaseModel], str] = {}
    out = []
    for _, key, _, info in walk(model, prefix, seen):
        subs = models(info.annotation)
        where = next((seen[m] for m in subs if seen.get(m) not in (None, _item_key(key, info.annotation, m))), None)
        description = (info.description or "") + (f" Its keys: as `{where}`." if where else "")
        out.append(FieldDoc(key, type_name(info), default_text(info), description, bool(subs) and not where))
    return out


def undocumented(model: type[BaseModel]) -> list[str]:
    """The keys of `model` (and below) whose field has no description."""
    return [key for _, key, _, info in walk(model) if not (info.description or "").strip()]


# ----------------------------------------------------------------------------------------------- rendering
def _strip_optional(t: Any) -> Any:
    args = [a for a in typing.get_args(t) if a is not type(None)]
    if typing.get_origin(t) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return t


def _type_text(t: Any) -> str:
    origin, args = typing.get_origin(t), typing.get_args(t)
    if t is type(None):
        return "null"
    if t is Any:
        return "any"
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_text(a) for a in args)
    if origin in (list, tuple):
        items = [a for a in args if a is not Ellipsis]
        return f"list of {_type_text(items[0])}" if items else "list"
    if origin is dict:
        return f"mapping of {_type_text(args[0])} to {_type_text(args[1])}" if args else "mapping"
    if isinstance(t, type) and issubclass(t, BaseModel):
        return "section"
    if isinstance(t, type) and issubclass(t, Enum):
        return " | ".join(str(m.value) for m in t)
    return getattr(t, "__name__", str(t))


def type_name(info: FieldInfo) -> str:
    """The field's type as a sweep file writes it, with its bounds (`int ≥ 1`, `float in (0, 1]`)."""
    text = _type_text(info.annotation)
    bounds = {type(m): m for m in info.metadata}
    low = bounds[Ge].ge if Ge in bounds else bounds[Gt].gt if Gt in bounds else None
    high = bounds[Le].le if Le in bounds else bounds[Lt].lt if Lt in bounds else None
    if low is not None and high is not None:
        lo, hi = f"in {'[' if Ge in bounds else '('}{low}, {high}{']' if Le in bounds else ')'}", ""
    else:
        lo = "" if low is None else f"{'≥' if Ge in bounds else '>'} {low}"
        hi = "" if high is None else f"{'≤' if Le in bounds else '<'} {high}"
    if MinLen in bounds:
        lo = f"at least {bounds[MinLen].min_length} long"
    if MaxLen in bounds:
        hi = f"at most {bounds[MaxLen].max_length} long"
    return " ".join(p for p in (text, lo, hi) if p)


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.default_factory() if info.default is PydanticUndefined else info.default
    if isinstance(value, BaseModel):  # a section: the keys whose default here differs from their own default
        own = type(value)().model_dump(by_alias=True)
        changed = {k: v for k, v in value.model_dump(by_alias=True).items() if own.get(k) != v}
        return json.dumps(changed) if changed else "(its keys' defaults)"
    try:
        return json.dumps(value.value if isinstance(value, Enum) else list(value) if isinstance(value, tuple)
                          else value)
    except TypeError:
        return repr(value)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def reference_markdown() -> str:
    """docs/configuration.md: every key of a sweep file, by section."""
    from workflow.config import RunConfig
    from workflow.sweep.spec import SweepSpec
    lines = ["# Configuration reference", "",
             "Generated from the models that validate a sweep file (`python scripts/docs.py`; "
             "`tests/unit/eval/test_reference.py` fails when this file is stale). A run's settings go under `base:` (and "
             "vary under `grid:`, `zip:` or `optuna.space:` by their dotted keys, e.g. `rl.sfpo.K`); the other "
             "top-level keys describe the sweep. Editors check and complete sweep files with "
             "[sweep.schema.json](sweep.schema.json) (README, \"A sweep file\").", ""]
    for title, model, prefix in (("The sweep file", SweepSpec, ""), ("The run config (`base:`)", RunConfig, "")):
        lines += [f"## {title}", ""]
        docs = [d for d in field_docs(model, prefix) if model is RunConfig or not d.key.startswith("base")]
        groups: dict[str, list[FieldDoc]] = {}
        for d in docs:
            groups.setdefault(d.key.rpartition(".")[0], []).append(d)
        for parent, items in groups.items():
            if parent:
                lines += [f"### `{parent}`", ""]
            lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
            lines += [f"| `{d.key.rpartition('.')[2]}` | {_cell(d.type)} | `{_cell(d.default)}` | "
                      f"{_cell(d.description)}{' (below)' if d.section else ''} |" for d in items]
            lines.append("")
    return "\n".join(lines + method_numbers_markdown())


def method_numbers_markdown() -> list[str]:
    """The shipped methods' per-step numbers: train_steps' columns beyond its own (docs/results.md), from the cards."""
    from workflow.methods.registry import METHODS, step_numbers
    lines = ["## The methods' per-step numbers (`train_steps`)", "",
             "Each method's card declares the numbers it logs per training step (`Method(numbers=...)`, "
             "[methods](methods.md), \"A method's numbers\"): each is a `train_steps` column, null in the rows of runs "
             "that do not select the method, on both engines.", "",
             "| column | type | logged by | meaning |", "|---|---|---|---|"]
    for number, methods in step_numbers():
        shipped = [m for m in methods if m in METHODS.builtins]
        if shipped:
            lines.append(f"| `{number.name}` | {number.type} | {', '.join(f'`{m}`' for m in shipped)} | "
                         f"{_cell(number.meaning)} |")
    return lines + [""]


def run_config_keys() -> list[str]:
    """Every dotted run-config key a grid, zip, exclude or Optuna space may name (a leaf of RunConfig)."""
    from workflow.config import RunConfig
    from workflow.sweep.keys import key_problem
    return [key for _, key, _, info in walk(RunConfig) if "[]" not in key and key_problem(key) is None]


def sweep_schema() -> dict:
    """The JSON Schema (draft 2020-12) of a sweep file."""
    from workflow.config import RunConfig
    from workflow.sweep.spec import SweepSpec
    schema = SweepSpec.model_json_schema(by_alias=True)
    run = RunConfig.model_json_schema(ref_template="#/$defs/{model}")
    defs = schema.setdefault("$defs", {})
    defs.update(run.pop("$defs", {}))
    defs["RunConfig"] = run
    keys = run_config_keys()
    key_name = {"type": "string", "enum": keys}
    props = schema["properties"]
    props["base"] = {**{k: v for k, v in props["base"].items() if k not in ("type", "additionalProperties")},
                     "$ref": "#/$defs/RunConfig"}
    props["grid"]["propertyNames"] = key_name
    for group in ("zip",):
        props[group]["anyOf"] = [{**s, "propertyNames": key_name} if s.get("type") == "object" else
                                 {**s, "items": {**s["items"], "propertyNames": key_name}}
                                 for s in props[group]["anyOf"]]
    props["exclude"]["items"]["propertyNames"] = key_name
    optuna = defs["OptunaSpec"]["properties"]
    optuna["space"]["propertyNames"] = key_name
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "rlsweep sweep file"
    return schema


def schema_text() -> str:
    return json.dumps(sweep_schema(), indent=1, sort_keys=True) + "\n"


def stale() -> list[Path]:
    """The generated files that differ from what the models give now."""
    return [p for p, text in generated().items() if not p.is_file() or p.read_text() != text]


def generated() -> dict[Path, str]:
    """Each generated page and what the code gives for it now."""
    from workflow.engine_api.capabilities import markdown as engines_markdown
    return {REFERENCE: reference_markdown(), SCHEMA: schema_text(), ENGINES_PAGE: engines_markdown()}


def write() -> list[Path]:
    DOCS.mkdir(exist_ok=True)
    for path, text in (pages := generated()).items():
        path.write_text(text)
    return list(pages)
