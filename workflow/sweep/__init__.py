"""Sweep YAML -> validated Run records (see spec.py for the file format, expand.py for identity)."""

from workflow.sweep.expand import Run, Sweep, load_sweep, stage_config
from workflow.sweep.identity import canonical_json, stable_id
from workflow.sweep.spec import SweepError, SweepSpec

__all__ = ["Run", "Sweep", "SweepError", "SweepSpec", "canonical_json", "load_sweep", "stable_id", "stage_config"]
