"""`python scripts/ci_time.py LOG`: the CI-time table of docs/tests.md gets a row from a .ci/run log (its closing
`ci: total` line and pytest's summary), newest first; a log of a run that did not end adds nothing."""

from __future__ import annotations

import importlib.util

import pytest

from helpers import REPO

spec = importlib.util.spec_from_file_location("ci_time", REPO / "scripts" / "ci_time.py")
ci_time = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ci_time)

LOG = """setup: ok
...
========== 2 failed, 946 passed, 24 skipped, 26 warnings in 1288.26s (0:21:28) ==========
stale: tests/long/test_x.py::test_y (no recorded pass)
long_tests: 1 long test(s) to run again before landing
ci: total 33m41s (set-up 731 s, tests 1290 s)
"""

DOC = f"""# Tests

{ci_time.MARK}
| commit | where | total | set-up + demo | tests | note |
|---|---|---|---|---|---|
| 1a5c2b0 | CI | 58:36 | | | older |
"""


def test_a_finished_runs_log_becomes_the_newest_row():
    row = ci_time.parse(LOG)
    assert row == {"total": "33:41", "setup": "731 s", "tests": "1290 s", "summary": "2 failed, 946 passed, 24 skipped"}
    out = ci_time.add_row(DOC, "abc1234", "fresh clone", row, "idle machine")
    table = [line for line in out.splitlines() if line.startswith("| ") and "commit" not in line]
    assert table == ["| abc1234 | fresh clone | 33:41 | 731 s | 1290 s | 2 failed, 946 passed, 24 skipped; idle machine |",
                     "| 1a5c2b0 | CI | 58:36 | | | older |"]


def test_a_run_that_did_not_end_adds_nothing():
    with pytest.raises(ValueError, match="did not finish"):
        ci_time.parse(LOG.rsplit("ci: total", 1)[0])
    assert "ci: total" in LOG and ci_time.parse(LOG.replace("set-up 731 s", "set-up ? s"))["setup"] == ""


def test_a_log_from_before_the_demo_left_ci_still_reads():
    assert ci_time.parse(LOG.replace("set-up 731 s", "set-up + demo 731 s"))["setup"] == "731 s"
