"""`rlsweep smoke`: the sweep's DAG shrunk to minutes on this machine (workflow/smoke.py makes it)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from workflow.atomic import write_text
from workflow.cli.common import err, results_root
from workflow.smoke import smoke_sweep
from workflow.sweep.expand import load_sweep
from workflow.sweep.loader import dump_yaml, load_yaml

SNAKEFILE = Path(__file__).resolve().parents[2] / "Snakefile"


def cmd_smoke(a) -> int:
    load_sweep(a.sweep_file)  # the original must be valid first: its own errors, with its own name
    raw = load_yaml(Path(a.sweep_file))
    smoke = smoke_sweep(raw, steps=a.steps)
    root = results_root(a)
    path = root / f"{smoke['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, f"# rlsweep smoke {a.sweep_file} (workflow/smoke.py)\n" + dump_yaml(smoke))
    sweep = load_sweep(path)
    err.print(f"smoke sweep {path}: {len(sweep.runs)} run(s), {len(sweep.jobs('sft'))} SFT job(s); results under "
               f"{root / sweep.name}")
    extra = shlex.split(a.snakemake)
    argv = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--config", f"sweep={path}", f"results={root}",
            *(["-n"] if a.dry_run else []), *extra]
    return subprocess.run(argv).returncode
