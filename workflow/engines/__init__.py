"""Engines train and sample. Each implements `Engine` (base.py); `get_engine(name)` imports only the one asked
for, so the CPU install never needs verl or vLLM."""

from __future__ import annotations

from workflow.engines.base import Engine, Sample, TrainLog


def get_engine(name: str) -> Engine:
    if name == "local":
        from workflow.engines.local import LocalEngine
        return LocalEngine()
    if name == "verl":
        # config translation + verl's own checks exist (verl_config.py, run when a sweep loads); the TrainingWorker /
        # trainer that run our update rules inside verl do not yet
        raise NotImplementedError("engine verl: the sweep's verl configuration is validated, but the verl training "
                                  "loop has not landed yet (issue 6); use engine.name: local for now")
    raise ValueError(f"unknown engine {name!r}")


__all__ = ["Engine", "Sample", "TrainLog", "get_engine"]
