#!/usr/bin/env python3
"""Add a row to the CI-time table of docs/tests.md from a `.ci/run` log: the commit, the total and its parts (the
log's closing `ci: total ...` line) and pytest's summary, newest first.

    python scripts/ci_time.py LOG [--where "fresh clone"] [--note TEXT] [--commit SHA]

The commit defaults to the checkout's HEAD (run it in the clone the log came from, or give --commit).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS_DOC = REPO / "docs" / "tests.md"
MARK = "<!-- ci-time: scripts/ci_time.py adds rows here -->"
# `set-up + demo` in the logs of .ci/run before issue 58 took the demo out of CI, `set-up` since
TOTAL = re.compile(r"^ci: total (\d+)m(\d+)s \(set-up(?: \+ demo)? (\S+) s, tests (\d+) s\)", re.M)
SUMMARY = re.compile(r"^=+ (.*\b(?:passed|failed)\b.*) in [\d.]+s", re.M)


def parse(log: str) -> dict[str, str]:
    """total (m:ss), set-up (with the demo, in older logs) and tests (s) and pytest's counts from a .ci/run log;
    ValueError if it has no closing line (a run that did not end)."""
    found = TOTAL.findall(log)
    if not found:
        raise ValueError("no `ci: total` line: the run did not finish")
    minutes, seconds, setup, tests = found[-1]
    summary = SUMMARY.findall(log)
    return {"total": f"{int(minutes)}:{int(seconds):02d}", "setup": "" if setup == "?" else f"{setup} s",
            "tests": f"{tests} s", "summary": re.sub(r",? ?\d+ warnings?", "", summary[-1]) if summary else ""}


def add_row(doc: str, commit: str, where: str, row: dict[str, str], note: str) -> str:
    if MARK not in doc:
        raise ValueError(f"{TESTS_DOC}: no {MARK}")
    head, rest = doc.split(MARK, 1)
    lines = rest.split("\n")
    # the marker, then the table's header and separator; the new row goes first under them
    at = next(i for i, line in enumerate(lines) if line.startswith("|---")) + 1
    text = "; ".join(x for x in (row["summary"], note) if x)
    lines.insert(at, f"| {commit} | {where} | {row['total']} | {row['setup']} | {row['tests']} | {text} |")
    return head + MARK + "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", type=Path)
    ap.add_argument("--where", default="fresh clone")
    ap.add_argument("--note", default="")
    ap.add_argument("--commit")
    a = ap.parse_args(argv)
    commit = a.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=a.log.parent, capture_output=True,
                                         text=True).stdout.strip() or "?"
    try:
        row = parse(a.log.read_text(errors="replace"))
    except ValueError as e:
        print(f"ci_time: {a.log}: {e}", file=sys.stderr)
        return 1
    TESTS_DOC.write_text(add_row(TESTS_DOC.read_text(), commit, a.where, row, a.note))
    print(f"ci_time: {commit} {a.where} {row['total']} added to {TESTS_DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
