"""Engines train and sample. Each implements `Engine` (base.py); `get_engine(name)` imports only the one asked
for, so the CPU install never needs verl or vLLM."""

from __future__ import annotations

from workflow.engines.base import Engine, Sample, TrainLog


def get_engine(name: str) -> Engine:
    if name == "local":
        from workflow.engines.local import LocalEngine
        return LocalEngine()
    if name == "verl":
        from workflow.engines.verl import VerlEngine
        return VerlEngine()
    raise ValueError(f"unknown engine {name!r}")


__all__ = ["Engine", "Sample", "TrainLog", "get_engine"]
