"""`python scripts/long_tests.py --stale`: the long tests whose covered code changed since their recorded pass (or
that never passed) are listed, so a change to that code reruns them before landing; the others are not."""

from __future__ import annotations

import importlib.util
import subprocess
import textwrap

from helpers import REPO

spec = importlib.util.spec_from_file_location("long_tests", REPO / "scripts" / "long_tests.py")
long_tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(long_tests)

TEST = '''
import pytest

SHARED = ["pkg/common.py"]
pytestmark = pytest.mark.slow


@pytest.mark.long(covers=[*SHARED, "pkg/engine/"])
def test_engine():
    pass


@pytest.mark.long
def test_alone():
    pass


def test_fast():
    pass
'''


def git(repo, *args) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def a_repo(tmp_path):
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "pkg" / "engine").mkdir(parents=True)
    (repo / "docs").mkdir()
    (repo / "tests" / "test_x.py").write_text(TEST)
    for f in ("pkg/common.py", "pkg/engine/run.py", "pkg/other.py"):
        (repo / f).write_text("x = 1\n")
    git(repo, "init", "-q")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "0")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "1")
    sha = git(repo, "rev-parse", "--short", "HEAD")
    doc = repo / "docs" / "tests.md"
    doc.write_text(textwrap.dedent(f"""\
        {long_tests.BEGIN}
        | test | last pass (UTC) | commit | time | last run |
        |---|---|---|---|---|
        | `tests/test_x.py::test_engine` | 2026-11-28 10:00 | {sha} | 1.0 min | passed 2026-11-28 10:00 |
        | `tests/test_x.py::test_alone` | 2026-11-28 10:00 | {sha} | 1.0 min | passed 2026-11-28 10:00 |
        {long_tests.END}
        """))
    return repo, doc


def test_every_long_test_of_the_suite_declares_the_code_it_covers():
    """A bare `pytest.mark.long` covers only its own file: --stale could then never say it is stale."""
    found = long_tests.declared_covers(REPO / "tests", REPO.resolve())
    assert found, "no long test found"
    bare = [test for test, paths in found.items() if paths == [test.split("::")[0]]]
    assert not bare, f"long tests without covers=[...]: {bare}"


def test_stale_lists_the_long_tests_whose_covered_code_changed_since_their_pass(tmp_path):
    repo, doc = a_repo(tmp_path)
    assert long_tests.declared_covers(repo / "tests", repo) == {
        "tests/test_x.py::test_engine": ["pkg/common.py", "pkg/engine/", "tests/test_x.py"],
        "tests/test_x.py::test_alone": ["tests/test_x.py"]}
    assert long_tests.stale(repo, doc) == []  # nothing changed since the pass
    (repo / "pkg" / "other.py").write_text("x = 2\n")  # code no long test covers
    assert long_tests.stale(repo, doc) == []
    (repo / "pkg" / "engine" / "new.py").write_text("y = 1\n")  # a new file under a covered folder, uncommitted
    assert long_tests.stale(repo, doc) == [
        ("tests/test_x.py::test_engine", f"passed at {git(repo, 'rev-parse', '--short', 'HEAD')}; changed since: "
                                         "pkg/engine/new.py")]
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "2")
    (repo / "tests" / "test_x.py").write_text(TEST + "\n")  # the test itself changed: both are stale
    assert [t for t, _ in long_tests.stale(repo, doc)] == ["tests/test_x.py::test_alone", "tests/test_x.py::test_engine"]
    doc.write_text(doc.read_text().replace("| `tests/test_x.py::test_alone`", "| `tests/test_x.py::test_gone`"))
    assert ("tests/test_x.py::test_alone", "no recorded pass") in long_tests.stale(repo, doc)


def test_a_test_moved_unchanged_into_a_folder_keeps_its_pass(tmp_path):
    repo, doc = a_repo(tmp_path)
    (repo / "tests" / "long").mkdir()
    git(repo, "mv", "tests/test_x.py", "tests/long/test_x.py")
    doc.write_text(doc.read_text().replace("tests/test_x.py", "tests/long/test_x.py"))
    assert long_tests.stale(repo, doc) == []
    (repo / "tests" / "long" / "test_x.py").write_text(TEST + "\n")
    assert len(long_tests.stale(repo, doc)) == 2


def test_a_pass_recorded_with_what_it_covered_goes_stale_with_any_change_to_it_and_survives_a_move(tmp_path):
    """A pass taken on a working tree with uncommitted changes (`<sha>+changes`) is judged by the digest recorded
    with it, not by the commit: the changes it ran with are not a change since."""
    repo, doc = a_repo(tmp_path)
    (repo / "pkg" / "engine" / "run.py").write_text("x = 2\n")  # uncommitted when the test passes
    test = "tests/test_x.py::test_engine"
    paths = long_tests.declared_covers(repo / "tests", repo)[test]
    text = doc.read_text()
    row = next(line for line in text.splitlines() if f"`{test}`" in line)
    done = row.replace(" | passed 2026-11-28 10:00 |", f" | passed 2026-11-28 10:00 | {long_tests.digest(repo, test, paths)} |")
    doc.write_text(text.replace(row, done.replace(git(repo, "rev-parse", "--short", "HEAD"),
                                                  git(repo, "rev-parse", "--short", "HEAD") + "+changes")))
    assert long_tests.stale(repo, doc) == []
    (repo / "tests" / "long").mkdir()
    git(repo, "mv", "tests/test_x.py", "tests/long/test_x.py")
    doc.write_text(doc.read_text().replace("tests/test_x.py", "tests/long/test_x.py"))
    assert long_tests.stale(repo, doc) == []
    (repo / "pkg" / "common.py").write_text("x = 3\n")
    assert [t for t, _ in long_tests.stale(repo, doc)] == ["tests/long/test_x.py::test_engine"]


def test_a_list_no_long_test_runs_is_not_covered_code(tmp_path, monkeypatch):
    """The verl seam's list is read only by CI's seam test: a symbol added to it leaves every verl long test's pass
    standing, while run code beside it still counts (that no module imports such a list: test_structure.py)."""
    repo, doc = a_repo(tmp_path)
    monkeypatch.setattr(long_tests, "NOT_RUN", {"pkg/engine/list.py": "read only by a test"})
    (repo / "pkg" / "engine" / "list.py").write_text("USES = []\n")
    assert long_tests.stale(repo, doc) == []  # a new list under a covered folder
    test = "tests/test_x.py::test_engine"
    paths = long_tests.declared_covers(repo / "tests", repo)[test]
    before = long_tests.digest(repo, test, paths)
    (repo / "pkg" / "engine" / "list.py").write_text("USES = ['x']\n")
    assert long_tests.digest(repo, test, paths) == before
    (repo / "pkg" / "engine" / "run.py").write_text("x = 2\n")  # beside it, run code still counts
    assert long_tests.digest(repo, test, paths) != before
    assert [t for t, _ in long_tests.stale(repo, doc)] == [test]
