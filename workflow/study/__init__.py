"""Optuna studies over the run config: the checks of the sweep's `optuna:` block against the run config and
define-by-run sampling (space.py; the block's own schema is workflow/sweep/study_spec.py, part of the sweep file),
the Optuna sampler / pruner / storage it names (factory.py), the trials' runs (trials.py), the objective
(objective.py), pruning between segments (pruning.py) and the driver that asks, runs and tells (driver.py).

Import from the submodules: this package imports nothing eagerly.
"""
