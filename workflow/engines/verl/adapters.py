"""What the verl engine needs of a method beyond its card: the method's verl adapter, looked up by the method's name.

A method's card (workflow/methods/base.py) is engine-neutral: its algorithm runs on any engine (on verl, in the
controller and the workers). A method that also needs something of verl itself declares a VerlAdapter beside its
card, in its own folder (`workflow/methods/<name>/verl_adapter.py`): the keys of verl's config it must have set (an
agent loop, a sampler) and the modules every verl process must import while it is selected (its verl half, which
registers itself in verl: Prefix-RFT's agent loop). The engine sets those keys, refuses a user override of them
(traits.py) and lists those modules in VERL_USE_EXTERNAL_MODULES (job/translate.py). A third engine keeps a registry
of its own adapters the same way, with no field of the card to add; a plug-in method registers its verl adapter
through the entry-point group `rlsweep.verl_adapters` (workflow/registry.py).

Light to import (no verl): the config checks read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workflow.registry import Registry


@dataclass(eq=False)
class VerlAdapter:
    """A method's needs of verl. `keys`: (the method's settings section, or None) -> {dotted verl key: value};
    `modules`: imported by every verl process of a run that selects the method."""

    keys: Callable[[Any], dict[str, Any]] | None = None
    modules: tuple[str, ...] = ()
    name: str = ""  # the method's name (set by the registry)


ADAPTERS = Registry("verl adapter", "verl_adapters", base="workflow.engines.verl.adapters:VerlAdapter", builtins={
    "prefix_rft": "workflow.methods.prefix_rft.verl_adapter:ADAPTER",
    "slow2fast": "workflow.methods.slow2fast.verl_adapter:ADAPTER",
})


def selected(rl) -> list[tuple[str, VerlAdapter]]:
    """(method name, its adapter) for each method the run selected (rl.selected: its cards) that has one."""
    return [(card.name, ADAPTERS.get(card.name)) for card in rl.selected if card.name in ADAPTERS]


def method_keys(rl) -> list[tuple[str, dict[str, Any]]]:
    """(method name, the verl config keys it sets) for each selected method whose adapter sets keys."""
    return [(name, adapter.keys(getattr(rl, name, None))) for name, adapter in selected(rl) if adapter.keys is not None]


def method_modules(rl) -> list[str]:
    """The modules the selected methods' adapters have every verl process import."""
    return [m for _, adapter in selected(rl) for m in adapter.modules]
