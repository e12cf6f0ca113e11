"""What every schema of the package shares: the strict pydantic base, pydantic errors as `key.path: reason`
lines, and reading a field's declared type through Optional / Annotated."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

# Every seed of a run: numpy's Generator refuses a negative seed (only once the job runs), and numpy's legacy
# seeding, vLLM and torch's generators all take 32-bit seeds
Seed = Annotated[int, Field(ge=0, lt=2**32)]


class ConfigProblem(ValueError):
    """A cross-field check's failure, raised from a model validator. `key` (dotted, relative to the model that
    raises it) is where the problem is reported, so a sweep's message reads `base.eval.every: ...`, not `base: ...`.
    """

    def __init__(self, key: str, reason: str):
        self.key, self.reason = key, reason
        super().__init__(f"{key}: {reason}" if key else reason)


class Strict(BaseModel):
    """Unknown keys are errors (a typo never falls back to a default silently); instances are immutable. Numbers
    are finite, and YAML's true / false is not a number (pydantic would read it as 1 / 0)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, v: Any, info: ValidationInfo) -> Any:
        if _bool_for_a_number(v, value_types(cls.model_fields[info.field_name].annotation)):
            raise ValueError("must be a number, not true / false")
        return v


def _bool_for_a_number(v: Any, alternatives: list[Any]) -> bool:
    """Whether `v` is, or a list / tuple holding, a bool where the field takes numbers but not bools."""
    if isinstance(v, bool):
        return not {bool, Any} & set(alternatives) and bool({int, float} & set(alternatives))
    if isinstance(v, (list, tuple)):
        items = [t for a in alternatives if typing.get_origin(a) in (list, tuple)
                 for i in typing.get_args(a) if i is not Ellipsis for t in value_types(i)]
        return bool(items) and any(_bool_for_a_number(x, items) for x in v)
    return False


# the names pydantic puts in an error's location for a member of a union, which a sweep file never writes (the tags of
# spec.py's `seeds:` union among them)
_UNION_TAGS = ("list[any]", "ConditionalAxis", "seed list", "seed design")


def format_validation_error(err: ValidationError, prefix: str = "",
                            explain_unknown: Callable[[str], str | None] | None = None) -> list[str]:
    """Pydantic errors as `key.path: reason` lines, the key path dotted the way a sweep file writes it.
    `explain_unknown(dotted key)` may say more than "unknown key" (e.g. suggest the closest name)."""
    lines = []
    for e in err.errors():
        parts = [p for p in e["loc"] if p not in _UNION_TAGS]
        loc = ".".join(str(p) for p in parts).replace("zip_", "zip")
        msg = e["msg"]
        problem = e.get("ctx", {}).get("error")
        if isinstance(problem, ConfigProblem):
            loc, msg = ".".join(x for x in (loc, problem.key) if x), problem.reason
        elif e["type"] == "extra_forbidden":
            named = explain_unknown(loc) if explain_unknown and all(isinstance(p, str) for p in parts) else None
            msg = named or "unknown key"
        elif "input" in e and e["type"] not in ("missing",) and not isinstance(e["input"], (dict, list)):
            msg = f"{msg} (got {e['input']!r})"
        key = ".".join(x for x in (prefix, loc) if x)
        lines.append(f"{key or '<top level>'}: {msg}")
    return lines


def value_types(annotation: Any) -> list[Any]:
    """The types a field's value may have: `int | None` -> [int, NoneType]; unions and Annotated[...] unwrapped
    all the way down (`Annotated[int | float, ...] | None` -> [int, float, NoneType])."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(annotation) for t in value_types(a)]
    if origin is typing.Annotated:
        return value_types(typing.get_args(annotation)[0])
    return [annotation]
