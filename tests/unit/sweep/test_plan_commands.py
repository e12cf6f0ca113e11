"""Every shipped sweep keeps its stage jobs' commands. What `snakemake -n -p` prints for a sweep is what its jobs
run (scripts/stage.py with the stage's typed config, its inputs and flags): a refactor that moves a module, renames
a folder or reorders a config must leave every line byte for byte as it was, or a user's running sweep would plan
different jobs after an upgrade. The recorded commands (tests/fixtures/commands/sweeps.json: each one's sha256, 16 hex
digits; the text of any recorded command is what this script prints at the commit that wrote it) were written by
`python tests/unit/sweep/test_plan_commands.py --write` before the renovation of issue 62; rewrite them only for a
change meant to alter a job's command (`--write NAME.yaml` rewrites that sweep's alone), and say so in the commit.
The sweeps' ids are pinned beside this (test_run_ids.py)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]  # (run as a script too: --write)
RECORDED = REPO / "tests" / "fixtures" / "commands" / "sweeps.json"


def commands_of(sweep: Path) -> list[str]:
    """The plan's jobs as `rule: shell command`, sorted (Snakemake's print order is not part of a job), with the
    checkout, the interpreter and the results folder written as placeholders so that any clone compares."""
    with tempfile.TemporaryDirectory() as results:
        out = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-n", "-p",
                              "--cores", "2", "--config", f"sweep={sweep}", f"results={results}"],
                             cwd=REPO, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        jobs, rule = [], None
        for line in out.stdout.splitlines():
            if line.startswith("rule ") and line.endswith(":"):
                rule = line[5:-1]
            elif line.startswith("Shell command: "):
                command = line[len("Shell command: "):]
                for real, placeholder in ((results, "{results}"), (sys.executable, "{python}"), (str(REPO), "{repo}")):
                    command = command.replace(real, placeholder)
                jobs.append(f"{rule}: {command}")
    return sorted(jobs)


def digest(command: str) -> str:
    return hashlib.sha256(command.encode()).hexdigest()[:16]


RECORDS = json.loads(RECORDED.read_text()) if RECORDED.is_file() else {}


@pytest.mark.slow  # a Snakemake plan per sweep (those of verl sweeps import verl to check their config)
@pytest.mark.parametrize("name", sorted(RECORDS))
def test_every_sweep_plans_the_same_commands(name):
    if "verl" in (REPO / "sweeps" / name).read_text() and not _has_verl():
        pytest.skip("a verl sweep's plan checks its config with verl")
    was, now = RECORDS[name], commands_of(REPO / "sweeps" / name)
    assert was, f"{name}: nothing recorded"
    new = [c for c in now if digest(c) not in set(was)]
    gone = set(was) - {digest(c) for c in now}
    assert not new and not gone and len(was) == len(now), (
        f"{name}: {len(gone)} recorded commands are no longer planned and {len(new)} not recorded are; the first "
        f"of those:\n{new[:1]}")


def test_every_sweep_is_recorded():
    assert sorted(p.name for p in (REPO / "sweeps").glob("*.yaml")) == sorted(RECORDS)


def _has_verl() -> bool:
    import importlib.util
    return importlib.util.find_spec("verl") is not None


if __name__ == "__main__" and sys.argv[1:2] == ["--write"]:
    names = sys.argv[2:] or [p.name for p in sorted((REPO / "sweeps").glob("*.yaml"))]
    RECORDED.parent.mkdir(parents=True, exist_ok=True)
    records = {**RECORDS, **{n: sorted(digest(c) for c in commands_of(REPO / "sweeps" / n)) for n in names}}
    RECORDED.write_text(json.dumps(dict(sorted(records.items())), indent=1) + "\n")
    print(f"wrote {RECORDED} ({', '.join(names)})")
