"""Engines by name (`engine.name` of the run config). ENGINES holds each engine's traits (workflow/engine_api/traits.py:
what callers ask of it, light to import); `get_engine(name)` builds its trainer, importing the training code only
then: a machine without verl runs the local engine, and reading a sweep imports neither. A third-party engine
registers its traits through the entry-point group `rlsweep.engines` (workflow/registry.py)."""

from __future__ import annotations

from typing import Any

from workflow.registry import Registry, load_object

ENGINES = Registry("engine", "engines", base="workflow.engine_api.traits:EngineTraits", builtins={
    "local": "workflow.engines.local_traits:LOCAL",
    "verl": "workflow.engines.verl.traits:VERL",
})


def traits(name: str):
    """The engine's EngineTraits; an unknown name fails with the known ones."""
    return ENGINES.get(name)


def get_engine(name: str) -> Any:
    """A new instance of the engine's trainer (workflow/engine_api/protocol.py Engine)."""
    return load_object(traits(name).trainer)()
