"""An engine's heavy checks (verl's own, ~20 s of a `rlsweep status` on 2 cores) run once per config, code and
installed packages on a machine (workflow/sweep/passed_checks.py): a sweep read again skips them, anything they read
changing runs them again, and a failure is never remembered."""

from __future__ import annotations

import pytest

import workflow.sweep.expand as expand
from helpers import write_sweep
from workflow.engines.local_traits import LOCAL, LocalTraits
from workflow.sweep import passed_checks
from workflow.sweep.expand import load_sweep
from workflow.sweep.spec import SweepError


class HeavyChecks(LocalTraits):
    """The local engine with checks of its own, counted; `refuse` names the key they refuse."""

    def __init__(self):
        self.calls, self.refuse = 0, None

    def sweep_problems(self, cfg) -> list[str]:
        self.calls += 1
        return [f"{self.refuse}: refused by the engine"] if self.refuse else []


@pytest.fixture
def heavy(monkeypatch, tmp_path):
    engine = HeavyChecks()
    monkeypatch.setattr(expand, "traits", lambda name: engine)
    monkeypatch.setenv("RLSWEEP_CHECK_CACHE", str(tmp_path / "checks"))
    return engine


def test_a_sweep_read_again_skips_the_checks_its_settings_passed(heavy, tmp_path):
    sweep = write_sweep(tmp_path / "s.yaml", "s", "seeds: [0, 1, 2]\ngrid:\n  rl.lr: [1.0e-4, 2.0e-4]\n")
    load_sweep(sweep)
    assert heavy.calls == 2  # once per setting: the seeds of one setting share what the checks judge
    load_sweep(sweep)
    assert heavy.calls == 2
    sweep.write_text(sweep.read_text().replace("seeds: [0, 1, 2]", "seeds: [0, 5]"))
    load_sweep(sweep)
    assert heavy.calls == 2  # new seeds of settings that passed
    sweep.write_text(sweep.read_text().replace("2.0e-4", "3.0e-4"))
    load_sweep(sweep)
    assert heavy.calls == 3  # only the new setting is checked


def test_a_failed_check_is_never_remembered(heavy, tmp_path):
    sweep = write_sweep(tmp_path / "s.yaml", "s")
    heavy.refuse = "engine.verl.overrides.x"
    for calls in (1, 2):
        with pytest.raises(SweepError, match="engine.verl.overrides.x: refused by the engine"):
            load_sweep(sweep)
        assert heavy.calls == calls
    heavy.refuse = None  # the engine (or the user's fix elsewhere) now accepts it
    load_sweep(sweep)
    load_sweep(sweep)
    assert heavy.calls == 3


def test_changed_code_or_packages_run_the_checks_again(heavy, tmp_path, monkeypatch):
    sweep = write_sweep(tmp_path / "s.yaml", "s")
    load_sweep(sweep)
    monkeypatch.setattr(passed_checks, "code_fingerprint", lambda: "an edited package")
    load_sweep(sweep)
    assert heavy.calls == 2
    monkeypatch.setattr(passed_checks, "environment_fingerprint", lambda: "verl upgraded")
    load_sweep(sweep)
    assert heavy.calls == 3


def test_the_fingerprints_see_an_edit_and_an_install(tmp_path, monkeypatch):
    passed_checks.environment_fingerprint.cache_clear()
    before = passed_checks.environment_fingerprint()
    (tmp_path / "newpkg-1.0.dist-info").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    passed_checks.environment_fingerprint.cache_clear()
    assert passed_checks.environment_fingerprint() != before
    passed_checks.environment_fingerprint.cache_clear()
    code = passed_checks.code_fingerprint()
    assert len(code) == 64 and code == passed_checks.code_fingerprint()


def test_off_checks_every_time_and_an_unwritable_cache_only_costs_the_checks(heavy, tmp_path, monkeypatch):
    sweep = write_sweep(tmp_path / "s.yaml", "s")
    monkeypatch.setenv("RLSWEEP_CHECK_CACHE", "off")
    load_sweep(sweep)
    load_sweep(sweep)
    assert heavy.calls == 2
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("RLSWEEP_CHECK_CACHE", str(blocked / "checks"))  # under a file: mkdir fails
    load_sweep(sweep)
    load_sweep(sweep)
    assert heavy.calls == 4


def test_an_engine_without_heavy_checks_leaves_no_markers(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSWEEP_CHECK_CACHE", str(tmp_path / "checks"))
    assert type(LOCAL).sweep_problems is not HeavyChecks.sweep_problems
    load_sweep(write_sweep(tmp_path / "s.yaml", "s", "seeds: [0, 1]\n"))
    assert not (tmp_path / "checks").exists()
