"""Engines by name (`engine.name` of the run config), each imported only when asked for: a machine without verl
runs the local engine, and reading a sweep imports neither."""

from __future__ import annotations

import importlib

from workflow.engines.base import Engine

ENGINES = {"local": ("workflow.engines.local", "LocalEngine"), "verl": ("workflow.engines.verl", "VerlEngine")}


def get_engine(name: str) -> Engine:
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
    module, cls = ENGINES[name]
    return getattr(importlib.import_module(module), cls)()
