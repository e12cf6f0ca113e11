"""Trials as runs: a trial's parameters (dotted keys) applied to the sweep's base, once per seed, are ordinary
Runs with ordinary ids, so a proposal identical to an earlier one is served from the cache like any run.

The driver records each trial it starts in results/<sweep>/study/trials/ before starting it; the Snakefile reads
the records back, so the rules (and every nested `snakemake` the driver starts) know the trials' runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from workflow.config import RunConfig
from workflow.results.writer import write_json_atomic
from workflow.sweep.expand import Run, _apply, _make_run, _verl_problem
from workflow.sweep.spec import SweepSpec, format_validation_error


class TrialError(ValueError):
    """Parameters that do not make a valid run (the trial fails; the study goes on)."""


def trial_runs(spec: SweepSpec, params: dict[str, Any]) -> list[Run]:
    """One run per seed of the sweep (replicates the objective averages)."""
    runs = []
    for seed in spec.seeds:
        assignment = {**params, "seed": seed}
        try:
            cfg = RunConfig.model_validate(_apply(spec.base, assignment))
        except ValidationError as e:
            raise TrialError("; ".join(format_validation_error(e))) from None
        if cfg.engine.name == "verl" and (problem := _verl_problem(cfg)):
            raise TrialError(problem)
        runs.append(_make_run(cfg, assignment))
    return runs


def format_params(params: dict[str, Any]) -> str:
    """A trial's parameters on one line, floats to 4 significant digits."""
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def study_dir(results_root: str | Path, sweep: str) -> Path:
    return Path(results_root) / sweep / "study"


def record_trial(results_root: str | Path, sweep: str, number: int, params: dict[str, Any]) -> Path:
    path = study_dir(results_root, sweep) / "trials" / f"trial_{number:05d}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"number": number, "params": params})
    return path


def recorded_runs(spec: SweepSpec, results_root: str | Path, sweep: str) -> list[Run]:
    """The runs of every recorded trial (a record whose parameters no longer make a run is skipped: the study
    marked that trial failed)."""
    runs: list[Run] = []
    for path in sorted((study_dir(results_root, sweep) / "trials").glob("trial_*.json")):
        try:
            runs += trial_runs(spec, json.loads(path.read_text())["params"])
        except TrialError:
            continue
    return runs
