"""The Tracker interface every backend implements, and the backends by name.

A backend is opened on one tracker run (runs.TrackedRun), says which (key, step) points that run already holds, and
logs points. Everything that calls it (hook.py in a job, backfill.py in `rlsweep track`) sends only what the run
lacks, so nothing is logged twice whoever sends it and however often. Backends import their library when opened:
reading a sweep with a `tracking:` block never imports wandb or mlflow.

Secrets never pass through here: W&B reads its key from WANDB_API_KEY or its login file, MLflow its credentials from
MLFLOW_TRACKING_USERNAME / _PASSWORD / _TOKEN; the sweep file may not hold them (sweep/spec.py refuses a URI that
does), and a run's config is its stage settings, which hold none.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from workflow.registry import load_object
from workflow.tracking.runs import Point, TrackedRun

BACKENDS = {"tensorboard": "workflow.tracking.tensorboard:TensorBoardTracker",
            "mlflow": "workflow.tracking.mlflow:MLflowTracker",
            "wandb": "workflow.tracking.wandb:WandbTracker"}


class Tracker(ABC):
    """One backend, opened on one tracker run at a time."""

    name: str = ""

    def __init__(self, settings: dict[str, Any], sweep: str, results_root: str | Path):
        self.settings, self.sweep, self.results_root = dict(settings or {}), sweep, Path(results_root)

    @abstractmethod
    def open(self, run: TrackedRun) -> None:
        """Create the tracker run, or continue it when it exists (its id is the run's key)."""

    @abstractmethod
    def logged(self) -> set[tuple[str, int]]:
        """The (key, step) points the open run holds."""

    @abstractmethod
    def log(self, points: list[Point]) -> None:
        """Add points to the open run (the caller sends none it holds)."""

    def close(self, finished: bool = False) -> None:
        """Let go of the run; `finished`: its stage job is done (a tracker that marks runs finished does)."""

    def prepare(self) -> None:
        """Once, where the sweep is planned, before any of its jobs: what each job would otherwise make at its start,
        racing the jobs that start beside it (a database's tables). Nothing by default."""


def make(name: str, settings: dict[str, Any], sweep: str, results_root: str | Path) -> Tracker:
    if name not in BACKENDS:
        raise ValueError(f"tracker {name!r}: one of {', '.join(BACKENDS)}")
    return load_object(BACKENDS[name])(settings, sweep, results_root)
