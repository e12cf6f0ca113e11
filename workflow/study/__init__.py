"""Optuna studies over the run config: the sweep's `optuna:` block (spec.py), its checks and define-by-run
sampling (space.py), and the Optuna sampler / pruner / storage it names (factory.py).

Import from the submodules: workflow.sweep imports spec.py, and space.py imports workflow.sweep, so this package
imports nothing eagerly.
"""
