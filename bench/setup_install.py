#!/usr/bin/env python3
"""How long does the README's set-up take with uv, against pip, on this machine and in the same run?

Each side runs `scripts/setup.sh` into a new virtual environment of its own (RLSWEEP_VENV in a temporary
directory), the whole script as a user's first `./scripts/setup.sh` runs it: torch, the project with its test
extras, vLLM's CPU build where there is no GPU, the real model's package, the byte-compilation. RLSWEEP_INSTALLER
chooses the installer (uv, or pip: what setup.sh did before issue 58). Printed: each side's wall time per step (the
script's own `setup:` lines, timed as they appear), the total, and pip / uv. Both sides read the same package caches
(~/.cache/pip, ~/.cache/uv) as they are: run it twice to compare warm caches.
Goal (issue 58): CI's set-up, most of it the install, well under the 344 s pip took at 9defe0d.

    python bench/setup_install.py [--sides uv pip] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_setup(venv: Path, installer: str) -> tuple[float, list[tuple[float, str]]]:
    """The whole set-up into `venv`: its wall time and each `setup:` line with the seconds since the start."""
    env = {**os.environ, "RLSWEEP_VENV": str(venv), "RLSWEEP_INSTALLER": installer}
    t0 = time.monotonic()
    proc = subprocess.Popen(["bash", str(REPO / "scripts" / "setup.sh")], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = []
    for line in proc.stdout:
        if line.startswith("setup:"):
            lines.append((time.monotonic() - t0, line.strip()))
            print(f"  [{installer} {lines[-1][0]:6.1f} s] {line.strip()}", flush=True)
    if proc.wait():
        sys.exit(f"setup with {installer} failed (exit {proc.returncode})")
    return time.monotonic() - t0, lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sides", nargs="+", default=["uv", "pip"], choices=["uv", "pip"])
    p.add_argument("--keep", action="store_true", help="keep the environments (printed) instead of removing them")
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rlsweep-bench-setup-"))
    totals = {}
    try:
        for side in a.sides:
            print(f"{side}: a new environment in {work / side}", flush=True)
            totals[side], lines = run_setup(work / side, side)
            steps = [(later[0] - t, text) for (t, text), later in zip(lines, [*lines[1:], (totals[side], "")])]
            for seconds, text in steps:
                print(f"  {side} {seconds:6.1f} s  {text}")
            print(f"{side}: {totals[side]:.1f} s in all")
    finally:
        if a.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if {"uv", "pip"} <= totals.keys():
        print(f"set-up: uv {totals['uv']:.1f} s, pip {totals['pip']:.1f} s: pip / uv = {totals['pip'] / totals['uv']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
