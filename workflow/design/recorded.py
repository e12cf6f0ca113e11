"""The runs a sweep has beyond its expansion: an Optuna study's trials (workflow/study/trials.py) or a design's later
rounds (workflow/design/rounds.py), as their drivers recorded them. Every place that lists a sweep's runs (the
Snakefile, status, watch, plan, report, rescore, gc) adds them through this one function."""

from __future__ import annotations

from pathlib import Path


def add_recorded_runs(sweep, results_root: str | Path):
    """Add the recorded runs to `sweep` (in place); returns it."""
    if sweep.spec.optuna is not None:
        from workflow.study.trials import recorded_runs
        sweep.add_runs(recorded_runs(sweep.spec, results_root, sweep.name))
    elif sweep.spec.design is not None:
        from workflow.design.rounds import recorded_runs
        sweep.add_runs(recorded_runs(sweep.spec, results_root, sweep.name))
    return sweep
