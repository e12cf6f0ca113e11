"""`rlsweep profile install`: the SLURM profile as a user profile with the cluster's names."""

from __future__ import annotations

import os
from pathlib import Path

from workflow.cli.common import err

PROFILE_SOURCE = Path(__file__).resolve().parents[2] / "profiles" / "slurm" / "config.yaml"


def profile_home() -> Path:
    """Where `snakemake --profile NAME` looks after the current directory (Snakemake uses the XDG config dir)."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "snakemake"


def cmd_profile_install(a) -> int:
    text = PROFILE_SOURCE.read_text()
    settings = {"partition": a.partition, "account": a.account, "qos": a.qos}
    filled = [f"rlsweep-slurm-{k}: {v}" for k, v in settings.items() if v]
    if filled:
        text += "# this cluster's defaults (a stage's own resources in the sweep win)\n" + "\n".join(filled) + "\n"
    target = profile_home() / a.name / "config.yaml"
    if target.exists() and target.read_text() != text and not a.force:
        err.print(f"error: {target} exists and differs; not overwriting it (use --force to replace it)")
        return 2
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    err.print(f"installed {target}\nrun a sweep on SLURM with: snakemake --profile {a.name} --config sweep=SWEEP.yaml")
    return 0
