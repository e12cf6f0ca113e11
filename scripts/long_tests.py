#!/usr/bin/env python3
"""Run every `long` test (minutes of a real cluster or a real model each; CI has no room for them) and record each
one's last pass in the "Long tests" table of docs/tests.md: date, commit, time. A failed or skipped test keeps its
previous pass and gets the outcome in its last column, so the table shows what has not passed since.

    python scripts/long_tests.py [PYTEST ARGS ...]     # e.g. -k two_node; as root (the SLURM tests start a cluster)

The tests are those marked `long` (tests/conftest.py); they run one at a time (-n 0): most start clusters.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS_DOC = REPO / "docs" / "tests.md"  # the long tests and their last passes
BEGIN, END = "<!-- long-tests: scripts/long_tests.py rewrites this table -->", "<!-- /long-tests -->"
HEADER = ["test", "last pass (UTC)", "commit", "time", "last run"]


def commit() -> str:
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    return f"{sha}+changes" if dirty else sha


def read_table(text: str) -> dict[str, list[str]]:
    """The table's rows by test id."""
    block = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block.strip().splitlines()[2:]]
    return {r[0].strip("`"): r for r in rows if r and r[0]}


def write_table(text: str, rows: dict[str, list[str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join([f"`{name}`", *row[1:]]) + " |" for name, row in sorted(rows.items())]
    return text[:text.index(BEGIN) + len(BEGIN)] + "\n" + "\n".join(lines) + "\n" + text[text.index(END):]


def outcomes(junit: Path) -> dict[str, tuple[str, float]]:
    """test id (file::name) -> (passed | failed | skipped, seconds) from pytest's JUnit XML."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/")
        test = f"{path}.py::{case.get('name')}"
        state = ("failed" if case.find("failure") is not None or case.find("error") is not None else
                 "skipped" if case.find("skipped") is not None else "passed")
        out[test] = (state, float(case.get("time", 0.0)))
    return out


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "long.xml"
        cmd = [sys.executable, "-m", "pytest", "-m", "long", "-n", "0", "-p", "no:cacheprovider",
               f"--junitxml={junit}", *argv]
        print("+", " ".join(cmd), flush=True)
        rc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "RLSWEEP_LONG_TESTS": "1"}).returncode
        if not junit.is_file():
            print(f"long_tests: pytest wrote no report; {TESTS_DOC} is unchanged", file=sys.stderr)
            return rc or 1
        results = outcomes(junit)
    text = TESTS_DOC.read_text()
    rows = read_table(text)
    now, sha = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"), commit()
    for test, (state, seconds) in results.items():
        minutes = f"{seconds / 60:.1f} min"
        if state == "passed":
            rows[test] = [test, now, sha, minutes, f"passed {now}"]
        else:
            old = rows.get(test, [test, "never", "", "", ""])
            rows[test] = [*old[:4], f"{state} {now} at {sha}"]
    TESTS_DOC.write_text(write_table(text, rows))
    for test, (state, seconds) in sorted(results.items()):
        print(f"{state:8s} {seconds / 60:5.1f} min  {test}")
    print(f"long_tests: the table of {TESTS_DOC} updated ({len(results)} tests)")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
