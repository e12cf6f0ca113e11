"""The sweep file: schema, loading and error reporting.

```yaml
name: demo                       # results/<name>/
base: {sft: {steps: 300}, rl: {lr: 1.0e-4}}   # a RunConfig, only what differs from the defaults
grid:                            # dotted key -> list of values: cartesian product
  rl.clip_high: [0.2, 0.28]
  rl.kl_coef: {values: [0.0, 0.01], when: {rl.loss_agg: token-mean}}   # only varies where it applies
zip:                             # parallel lists, one axis of the product
  rl.lr: [1.0e-4, 5.0e-5]
  rl.steps: [40, 80]
exclude:                         # drop points matching every key of an entry
  - {rl.clip_high: 0.2, rl.lr: 5.0e-5}
seeds: [0, 1]
resources: {rl: {threads: 1}}    # how to run a stage; never part of a run's identity
```
Every problem is reported as `<file>: <key path>: <reason>` before any job starts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, field_validator


class SweepError(Exception):
    """A sweep file that cannot be turned into runs. `str()` is the full, user-facing message."""

    def __init__(self, path: str | Path, problems: list[str]):
        self.path = str(path)
        self.problems = problems
        super().__init__("\n".join(f"{self.path}: {p}" for p in problems))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ConditionalAxis(_Strict):
    """A grid axis that only multiplies the points where every `when` key has (one of) the given value(s)."""

    values: list[Any]
    when: dict[str, Any] = Field(default_factory=dict)


class StageResources(_Strict):
    threads: PositiveInt = 1


class Resources(_Strict):
    sft: StageResources = StageResources(threads=2)
    rl: StageResources = StageResources(threads=1)
    eval: StageResources = StageResources(threads=1)


class SweepSpec(_Strict):
    name: str
    description: str = ""
    base: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any] | ConditionalAxis] = Field(default_factory=dict)
    zip_: dict[str, list[Any]] | list[dict[str, list[Any]]] = Field(default_factory=dict, alias="zip")
    exclude: list[dict[str, Any]] = Field(default_factory=list)
    seeds: list[int] = Field(default_factory=lambda: [0])
    resources: Resources = Resources()

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", v):
            raise ValueError("must be 1-64 characters of letters, digits, '_', '.', '-' (it names results/<name>/)")
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("empty list: give at least one seed")
        if len(set(v)) != len(v):
            raise ValueError(f"repeated seed in {v}")
        return v

    @property
    def zip_groups(self) -> list[dict[str, list[Any]]]:
        return [self.zip_] if isinstance(self.zip_, dict) else list(self.zip_)


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


def read_spec(path: str | Path) -> SweepSpec:
    path = Path(path)
    if not path.is_file():
        raise SweepError(path, ["sweep file not found" + ("" if path.suffix in (".yaml", ".yml") else
                                                           " (expected a .yaml file)")])
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise SweepError(path, [f"not valid YAML: {e}"]) from None
    if not isinstance(raw, dict):
        raise SweepError(path, ["<top level>: must be a mapping with at least `name:`"])
    try:
        return SweepSpec.model_validate(raw)
    except ValidationError as e:
        raise SweepError(path, format_validation_error(e)) from None
