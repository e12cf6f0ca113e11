"""`rlsweep track SWEEP.yaml [--to BACKEND ...]`: send the sweep's trackers what the store holds that they lack
(workflow/tracking/backfill.py). Idempotent: a second run sends nothing."""

from __future__ import annotations

from workflow.cli.common import err, results_root
from workflow.sweep.expand import load_sweep
from workflow.tracking.backfill import track

NEEDS = {"wandb": "tracking.wandb.project"}  # what a backend cannot go without


def cmd_track(a) -> int:
    sweep = load_sweep(a.sweep_file)
    configured = sweep.spec.tracking.model_dump(mode="json")
    names = a.to or sweep.spec.tracking.backends
    if not names:
        err.print(f"[red]error:[/] {a.sweep_file}: tracking: no tracker set; add one (tracking: {{tensorboard: {{}}}}) "
                  "or name one with --to tensorboard|mlflow|wandb")
        return 2
    settings = {}
    for name in names:
        if configured.get(name) is None and name in NEEDS:
            err.print(f"[red]error:[/] {a.sweep_file}: {NEEDS[name]}: needed to send to {name} (the sweep's tracking "
                      "block has none)")
            return 2
        settings[name] = configured.get(name) or {}
    sent = track(results_root(a), sweep.name, settings, planned=sweep.members(), say=err.print)
    return 1 if any(s.errors for s in sent) else 0
