"""What every schema of the package shares: the strict pydantic base, pydantic errors as `key.path: reason`
lines, and reading a field's declared type through Optional / Annotated."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


class Strict(BaseModel):
    """Unknown keys are errors (a typo never falls back to a default silently); instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def format_validation_error(err: ValidationError, prefix: str = "") -> list[str]:
    """Pydantic errors as `key.path: reason` lines, the key path dotted the way a sweep file writes it."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"] if p not in ("list[any]", "ConditionalAxis"))
        loc = loc.replace("zip_", "zip")
        key = ".".join(x for x in (prefix, loc) if x)
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif "input" in e and e["type"] not in ("missing",) and not isinstance(e["input"], (dict, list)):
            msg = f"{msg} (got {e['input']!r})"
        lines.append(f"{key or '<top level>'}: {msg}")
    return lines


def value_types(annotation: Any) -> list[Any]:
    """The types a field's value may have: `int | None` -> [int, NoneType], Annotated[...] unwrapped."""
    args = (typing.get_args(annotation)
            if typing.get_origin(annotation) in (typing.Union, types.UnionType) else (annotation,))
    return [typing.get_args(a)[0] if typing.get_origin(a) is typing.Annotated else a for a in args]
