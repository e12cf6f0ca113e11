"""`rlsweep track SWEEP.yaml [--to BACKEND ...]`: send the sweep's trackers what the store holds that they lack
(workflow/tracking/backfill.py). Idempotent: a second run sends nothing."""

from __future__ import annotations

import os

from workflow.cli.common import err, results_root
from workflow.sweep.expand import load_sweep
from workflow.tracking.backfill import track
from workflow.tracking.destinations import resolve
from workflow.tracking.hook import tracking_settings


def cmd_track(a) -> int:
    sweep = load_sweep(a.sweep_file)
    configured = sweep.spec.tracking.model_dump(mode="json")
    names = a.to or sweep.spec.tracking.backends
    if not names:
        err.print(f"[red]error:[/] {a.sweep_file}: tracking: no tracker set; add one (tracking: {{tensorboard: {{}}}}) "
                  "or name one with --to tensorboard|mlflow|wandb")
        return 2
    root = results_root(a)
    # where the sweep's jobs sent (tracking.json, resolved when it was planned); a tracker the record lacks (not
    # planned yet, or `--to` one the block has not) resolved from the environment now
    recorded = tracking_settings(root, sweep.name)
    settings = {name: recorded.get(name) or resolve(name, configured.get(name), sweep.name, os.environ, err.print)
                for name in names}
    sent = track(root, sweep.name, settings, planned=sweep.members(), say=err.print)
    return 1 if any(s.errors for s in sent) else 0
