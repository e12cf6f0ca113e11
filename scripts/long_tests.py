#!/usr/bin/env python3
"""Run every `long` test (minutes of a real cluster or a real model each; CI has no room for them) and record each
one's last pass in the "Long tests" table of docs/tests.md: date, commit, time. A failed or skipped test keeps its
previous pass and gets the outcome in its last column, so the table shows what has not passed since.

    python scripts/long_tests.py [PYTEST ARGS ...]     # e.g. -k two_node; as root (the SLURM tests start a cluster)
    python scripts/long_tests.py --stale               # the long tests whose covered paths changed since their pass

The tests are those marked `long` (tests/conftest.py); they run one at a time (-n 0): most start clusters. Each
declares the paths of the code it covers, `@pytest.mark.long(covers=[...])` (on the test, or on the module's
`pytestmark`); the test's own file always counts. `--stale` lists each long test whose paths changed (committed or
not) since the commit of its last recorded pass, or that has none; `.ci/run` prints that list at its end. A change
to those paths reruns the test before landing (docs/tests.md). Files no long test runs (NOT_RUN: lists that only
CI's tests read) are not covered code.
"""

from __future__ import annotations

import ast
import datetime as dt
import hashlib
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
HEADER = ["test", "last pass (UTC)", "commit", "time", "last run", "covered code"]
# files under covered paths that no long test runs: lists the project's tests check, which no module of the package
# imports (tests/unit/core/test_structure.py holds that). A change to one is no change to what a pass was of.
NOT_RUN = {
    "workflow/engines/verl/seam.py": "the verl symbols the engine relies on, read only by tests/verl/test_verl_seam.py",
}


def commit() -> str:
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    return f"{sha}+changes" if dirty else sha


def read_table(text: str) -> dict[str, list[str]]:
    """The table's rows by test id."""
    block = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block.strip().splitlines()[2:]]
    return {r[0].strip("`"): r + [""] * (len(HEADER) - len(r)) for r in rows if r and r[0]}


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


def _paths(node: ast.expr, names: dict[str, ast.expr]) -> list[str]:
    """A list of path strings as written: literals, a module-level name bound to such a list, `*NAME` inside one."""
    if isinstance(node, ast.Name):
        return _paths(names[node.id], names)
    if isinstance(node, ast.Starred):
        return _paths(node.value, names)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [p for e in node.elts for p in (_paths(e, names) if not isinstance(e, ast.Constant) else [e.value])]
    raise ValueError(f"covers=: a list of path strings, not {ast.unparse(node)}")


def _long_covers(marks: list[ast.expr], names: dict[str, ast.expr]) -> list[str] | None:
    """The `covers` of a `pytest.mark.long(covers=[...])` among decorators / pytestmark entries; [] for a bare
    `pytest.mark.long`; None when none of them is `long`."""
    for mark in marks:
        call = mark if isinstance(mark, ast.Call) else None
        target = call.func if call else mark
        if isinstance(target, ast.Attribute) and target.attr == "long":
            covers = next((k.value for k in (call.keywords if call else []) if k.arg == "covers"), None)
            return [] if covers is None else _paths(covers, names)
    return None


def declared_covers(tests_dir: Path, repo: Path) -> dict[str, list[str]]:
    """test id (path::name, without parameters) -> the paths it covers, for every long test under `tests_dir`:
    read from the source, so listing them starts no pytest."""
    out = {}
    for path in sorted(tests_dir.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        names = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)}
        module = None
        if "pytestmark" in names:
            marks = names["pytestmark"]
            module = _long_covers(marks.elts if isinstance(marks, (ast.List, ast.Tuple)) else [marks], names)
        rel = path.relative_to(repo).as_posix()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                own = _long_covers(node.decorator_list, names)
                if own is not None or module is not None:
                    out[f"{rel}::{node.name}"] = sorted({rel, *(module or []), *(own or [])})
    return out


def _covered(path: str, paths: list[str]) -> bool:
    return path not in NOT_RUN and any(path == p or (p.endswith("/") and path.startswith(p)) for p in paths)


def changed_since(repo: Path, sha: str, paths: list[str]) -> list[str] | None:
    """The files under `paths` changed between commit `sha` and the working tree (a file moved unchanged is not a
    change: tests moved into folders keep their passes); None: no such commit here."""
    known = subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=repo, capture_output=True)
    if known.returncode != 0:
        return None
    diff = subprocess.run(["git", "diff", "--name-status", "-M", sha], cwd=repo, capture_output=True, text=True,
                          check=True).stdout.splitlines()
    changed = set()
    for line in diff:
        status, *names = line.split("\t")
        if status == "R100":  # moved, not changed
            continue
        changed.update(names)  # (a rename with edits counts under both names)
    new = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=repo, capture_output=True,
                         text=True, check=True).stdout.split()
    return sorted(f for f in {*changed, *new} if _covered(f, paths))


def digest(repo: Path, test: str, paths: list[str]) -> str:
    """What a long test's pass was of: a hash of the files under its covered paths as they are in the working tree
    (committed or not; git's ignored files left out), each named by its path except the test's own file, so moving a
    test unchanged keeps its pass. Recorded with each pass; --stale compares it with today's."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "--", *paths], cwd=repo,
                            capture_output=True, text=True, check=True).stdout.split()
    h = hashlib.sha256()
    own = test.split("::")[0]
    for name in sorted(set(listed) - NOT_RUN.keys()):
        f = repo / name
        if not f.is_file():  # (deleted, not yet committed)
            continue
        h.update(b"" if name == own else name.encode())
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:12]


def stale(repo: Path = REPO, doc: Path = TESTS_DOC) -> list[tuple[str, str]]:
    """(test id, why) of every long test to run again: its covered paths changed since its recorded pass, or it has
    none recorded. Parametrized tests count as one (their cases share the paths): the oldest case's pass decides."""
    rows = read_table(doc.read_text())
    out = []
    for test, paths in sorted(declared_covers(repo / "tests", repo).items()):
        passes = [r for name, r in rows.items() if name.split("[")[0] == test and r[1] != "never"]
        if not passes:
            out.append((test, "no recorded pass"))
            continue
        oldest = min(passes, key=lambda r: r[1])
        if oldest[5]:  # the pass recorded what it covered: any difference in it is a change
            if oldest[5] != digest(repo, test, paths):
                out.append((test, f"passed at {oldest[2]}; its covered code changed since (covers: {', '.join(paths)})"))
            continue
        sha = oldest[2].removesuffix("+changes")  # a pass recorded before digests: what git says changed since
        changed = changed_since(repo, sha, paths)
        if changed is None:
            out.append((test, f"its pass at {oldest[2]} is of a commit not in this history"))
        elif changed:
            shown = ", ".join(changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
            out.append((test, f"passed at {oldest[2]}; changed since: {shown}"))
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["--stale"]:
        found = stale()
        for test, why in found:
            print(f"stale: {test} ({why})")
        print(f"long_tests: {len(found)} long test(s) to run again before landing"
              + (" (python scripts/long_tests.py -k NAME)" if found else ""))
        return 0
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
    covers = declared_covers(REPO / "tests", REPO)
    now, sha = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"), commit()
    for test, (state, seconds) in results.items():
        minutes = f"{seconds / 60:.1f} min"
        if state == "passed":
            rows[test] = [test, now, sha, minutes, f"passed {now}", digest(REPO, test, covers.get(test.split("[")[0], [test.split("::")[0]]))]
        else:
            old = rows.get(test, [test, "never", "", "", "", ""])
            rows[test] = [*old[:4], f"{state} {now} at {sha}", old[5]]
    TESTS_DOC.write_text(write_table(text, rows))
    for test, (state, seconds) in sorted(results.items()):
        print(f"{state:8s} {seconds / 60:5.1f} min  {test}")
    print(f"long_tests: the table of {TESTS_DOC} updated ({len(results)} tests)")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
