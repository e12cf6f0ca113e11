"""A big sweep read again is not expanded again (workflow/sweep/expansion_cache.py): the runs come back equal to a
fresh expansion's, anything the expansion reads changing expands it again, a file the runs name that is gone is
named exactly as without the cache, and a cache file that is damaged, foreign or writable by others is never
trusted."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import workflow.sweep.expand as expand
from helpers import REPO, write_sweep
from workflow.sweep import expansion_cache
from workflow.sweep.expand import load_sweep
from workflow.sweep.spec import SweepError

GRID = """
seeds: [0, 1, 2]
grid:
  rl.lr: [1.0e-4, 2.0e-4]
"""


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """Every sweep counts as big; expansions go to a private cache under tmp_path and are counted."""
    monkeypatch.setenv("RLSWEEP_CHECK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(expansion_cache, "CACHED_FROM", 2)
    calls = []
    real = expand.expand
    monkeypatch.setattr(expand, "expand", lambda spec, path="<sweep>": calls.append(spec.name) or real(spec, path))
    return calls


def same_runs(a, b) -> None:
    assert [r.ids for r in a] == [r.ids for r in b]
    assert [r.config for r in a] == [r.config for r in b]
    assert [r.assignment for r in a] == [r.assignment for r in b]
    assert [r.stage_json for r in a] == [r.stage_json for r in b]


def test_a_big_sweep_read_again_comes_from_the_cache_equal_to_its_expansion(counted, tmp_path, monkeypatch):
    sweep = write_sweep(tmp_path / "s.yaml", "s", GRID)
    first = load_sweep(sweep).runs
    again = load_sweep(sweep)
    assert counted == ["s"] and len(again.runs) == 6
    same_runs(first, again.runs)
    assert len(again.jobs("rl")) == 6 and again.label("rl", again.runs[0].run_id) == "rl.lr=0.0001"
    monkeypatch.setenv("RLSWEEP_CHECK_CACHE", "off")  # the cache off: expanded, and equal
    same_runs(first, load_sweep(sweep).runs)
    assert counted == ["s", "s"]


def test_anything_the_expansion_reads_changing_expands_again(counted, tmp_path, monkeypatch):
    sweep = write_sweep(tmp_path / "s.yaml", "s", GRID)
    load_sweep(sweep)
    sweep.write_text(sweep.read_text().replace("2.0e-4", "3.0e-4"))  # the sweep
    assert {r.config.rl.lr for r in load_sweep(sweep).runs} == {1e-4, 3e-4}
    for fingerprint in ("code_fingerprint", "environment_fingerprint"):  # the package's code, the installed packages
        monkeypatch.setattr(expansion_cache, fingerprint, lambda: f"another {fingerprint}")
        load_sweep(sweep)
    monkeypatch.setattr(expansion_cache, "plugin_fingerprint", lambda: "a plug-in edited")
    load_sweep(sweep)
    assert len(counted) == 5
    load_sweep(sweep)
    assert len(counted) == 5


def test_a_plugins_source_is_in_its_fingerprint(tmp_path, monkeypatch):
    """An editable plug-in's edit changes no installed distribution's name: its files' times are fingerprinted."""
    plugin = tmp_path / "site" / "labplug"
    plugin.mkdir(parents=True)
    (plugin / "__init__.py").write_text("X = 1\n")
    dist = tmp_path / "site" / "labplug-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: labplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[rlsweep.graders]\nlab = labplug:X\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    expansion_cache.plugin_fingerprint.cache_clear()
    before = expansion_cache.plugin_fingerprint()
    os.utime(plugin / "__init__.py", ns=(1, 1))
    expansion_cache.plugin_fingerprint.cache_clear()
    assert expansion_cache.plugin_fingerprint() != before
    expansion_cache.plugin_fingerprint.cache_clear()


def test_a_named_file_gone_is_refused_as_without_the_cache(counted, tmp_path, monkeypatch):
    data = tmp_path / "gsm8k.jsonl"
    shutil.copy(REPO / "tests" / "fixtures" / "benchmarks" / "gsm8k.jsonl", data)
    sweep = write_sweep(tmp_path / "s.yaml", "s", GRID + f"  eval.paths: [{{gsm8k: {data}}}]\n")
    load_sweep(sweep)
    load_sweep(sweep)
    assert len(counted) == 1
    data.unlink()
    with pytest.raises(SweepError) as cached:
        load_sweep(sweep)
    monkeypatch.setenv("RLSWEEP_CHECK_CACHE", "off")
    with pytest.raises(SweepError) as fresh:
        load_sweep(sweep)
    assert str(cached.value) == str(fresh.value) and "gsm8k" in str(fresh.value)


def cache_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "expansions").glob("*.pickle"))


def test_a_damaged_or_writable_by_others_cache_file_is_never_trusted(counted, tmp_path):
    sweep = write_sweep(tmp_path / "s.yaml", "s", GRID)
    runs = load_sweep(sweep).runs
    [kept] = cache_files(tmp_path)
    assert kept.stat().st_mode & 0o777 == 0o600 and kept.parent.stat().st_mode & 0o777 == 0o700
    kept.write_bytes(kept.read_bytes()[:100])  # torn
    same_runs(runs, load_sweep(sweep).runs)
    assert len(counted) == 2  # expanded again, and written whole again
    same_runs(runs, load_sweep(sweep).runs)
    assert len(counted) == 2
    kept.chmod(0o620)  # another user of the group could have put anything there: pickle runs what it reads
    load_sweep(sweep)
    kept.chmod(0o600)
    kept.parent.chmod(0o777)
    load_sweep(sweep)
    assert len(counted) == 4


def test_a_failed_expansion_is_never_kept_and_off_keeps_nothing(counted, tmp_path, monkeypatch):
    bad = write_sweep(tmp_path / "bad.yaml", "bad", GRID.replace("1.0e-4", "-1.0"))
    for _ in range(2):
        with pytest.raises(SweepError, match="rl.lr"):
            load_sweep(bad)
    assert cache_files(tmp_path) == []
    monkeypatch.setenv("RLSWEEP_CHECK_CACHE", "off")
    load_sweep(write_sweep(tmp_path / "s.yaml", "s", GRID))
    assert not (tmp_path / "cache").exists()


def test_small_sweeps_never_touch_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSWEEP_CHECK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(expansion_cache, "code_fingerprint", lambda: pytest.fail("a small sweep took fingerprints"))
    load_sweep(write_sweep(tmp_path / "s.yaml", "s", GRID))  # 6 runs, below CACHED_FROM
    assert not (tmp_path / "cache").exists()


def test_only_the_most_recently_read_expansions_are_kept(counted, tmp_path, monkeypatch):
    monkeypatch.setattr(expansion_cache, "KEEP", 2)
    sweeps = [write_sweep(tmp_path / f"s{i}.yaml", f"s{i}", GRID) for i in range(3)]
    load_sweep(sweeps[0])
    [first] = cache_files(tmp_path)
    load_sweep(sweeps[1])
    [second] = set(cache_files(tmp_path)) - {first}
    os.utime(first, (1, 1))  # (times set: two writes can share one tick of the file system's clock)
    os.utime(second, (2, 2))
    load_sweep(sweeps[0])  # read again: now the most recently read
    load_sweep(sweeps[2])
    assert first.exists() and not second.exists() and len(cache_files(tmp_path)) == 2
    load_sweep(sweeps[1])  # the one pruned: expanded again
    assert counted == ["s0", "s1", "s2", "s1"]
