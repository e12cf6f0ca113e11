"""Trials as runs: a trial's parameters (dotted keys) applied to the sweep's base, once per seed, are ordinary
Runs with ordinary ids (`runs_for`, as a grid point), so a proposal identical to an earlier one is served from the
cache like any run.

The driver records each trial it starts in results/<sweep>/study/trials/ before starting it; the Snakefile reads
the records back, so the rules (and every nested `snakemake` the driver starts) know the trials' runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workflow.atomic import write_json
from workflow.layout import trial_record, trial_records
from workflow.sweep.expand import PointError, Run, runs_for
from workflow.sweep.spec import SweepSpec


class TrialError(ValueError):
    """Parameters that do not make a valid run (the trial fails; the study goes on)."""


def trial_runs(spec: SweepSpec, params: dict[str, Any]) -> list[Run]:
    """One run per seed of the sweep (replicates the objective averages)."""
    try:
        return runs_for(spec, params)
    except PointError as e:
        raise TrialError(str(e)) from None


def format_params(params: dict[str, Any]) -> str:
    """A trial's parameters on one line, floats to 4 significant digits."""
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def record_trial(results_root: str | Path, sweep: str, number: int, params: dict[str, Any]) -> Path:
    return write_json(trial_record(results_root, sweep, number), {"number": number, "params": params})


def recorded_runs(spec: SweepSpec, results_root: str | Path, sweep: str) -> list[Run]:
    """The runs of every recorded trial (a record whose parameters no longer make a run is skipped: the study
    marked that trial failed)."""
    runs: list[Run] = []
    for path in trial_records(results_root, sweep):
        try:
            runs += trial_runs(spec, json.loads(path.read_text())["params"])
        except TrialError:
            continue
    return runs
