"""Which settings a design compares: families of settings, and the pairs within each.

`compare: KEY` (a grid or zip key): the settings that differ only in KEY form one family, so a grid
{rl.update: [grpo, sfpo, gxpo], rl.lr: [1e-5, 3e-5]} makes two families (one per rl.lr) of three settings each and
every pair within a family is compared (3 + 3 pairs), never a setting against one of another family.
`compare: baseline`: one family, every setting against report.baseline.

One test covers every pair of every family, so the family-wise error holds over all of them together.
A setting is a grid point (its label: the assignment without the seed); its point makes its runs of any round.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from workflow.sweep.design_spec import BASELINE
from workflow.sweep.keys import format_value


@dataclass(frozen=True)
class Setting:
    label: str  # the runs' label (workflow/sweep/expand.py Run.label)
    point: dict[str, Any]  # the grid point, without the seed


@dataclass(frozen=True)
class Family:
    fixed: str  # what the family's settings share ("" for one family)
    settings: tuple[Setting, ...]
    pairs: tuple[tuple[str, str], ...]  # labels


def families(spec, runs) -> list[Family]:
    """The design's families, from the sweep's runs (one per setting and seed; the settings in the grid's order)."""
    design = spec.design
    settings: dict[str, Setting] = {}
    for r in runs:
        settings.setdefault(r.label, Setting(r.label, {k: v for k, v in r.assignment.items() if k != "seed"}))
    if design.compare == BASELINE:
        base = spec.report.baseline
        ordered = [settings[base], *(s for label, s in settings.items() if label != base)]
        return [Family("", tuple(ordered), tuple((base, s.label) for s in ordered[1:]))]
    groups: dict[str, list[Setting]] = {}
    for s in settings.values():
        fixed = " ".join(f"{k}={format_value(v)}" for k, v in s.point.items() if k != design.compare)
        groups.setdefault(fixed, []).append(s)
    return [Family(fixed, tuple(members), tuple(itertools.combinations([m.label for m in members], 2)))
            for fixed, members in groups.items()]


def shown(design, label: str) -> str:
    """A setting as a table names it beside its family: the compared key's value alone (`sfpo`, the family saying
    what else is fixed); the whole label for `compare: baseline`."""
    if design.compare == BASELINE:
        return label
    prefix = f"{design.compare}="
    return next((part[len(prefix):] for part in label.split(" ") if part.startswith(prefix)), label)


def all_pairs(found: list[Family]) -> list[tuple[str, str]]:
    return [p for f in found for p in f.pairs]


def compared_settings(found: list[Family]) -> list[Setting]:
    """Every setting in some pair, once, in family order."""
    out: dict[str, Setting] = {}
    for f in found:
        paired = {x for p in f.pairs for x in p}
        for s in f.settings:
            if s.label in paired:
                out.setdefault(s.label, s)
    return list(out.values())
