"""Malformed sweeps are refused when they load, before any job starts, as `<file>: <key path>: <reason>` without a
traceback: YAML read two ways (repeated keys), values pydantic would coerce (true for a count, negative seeds),
settings that silently do nothing (an exclude or a `when` matching no point, a key varied twice), non-finite
numbers, files too large / too deep / too aliased / too many runs to expand in bounded time and memory, dataset
files that do not exist; base keys get "did you mean", cross-field checks name their key."""

from __future__ import annotations

import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from helpers import REPO, refusal, run_cli, write_sweep
from workflow.sweep.expand import MAX_RUNS, load_sweep
from workflow.sweep.loader import MAX_DEPTH, MAX_FILE_BYTES, dump_yaml, load_yaml


def refused_within_bounds(path: Path, seconds: float = 5.0, megabytes: float = 100.0) -> str:
    """refusal(), checked to take at most `seconds` and allocate at most `megabytes` at its peak."""
    tracemalloc.start()
    start = time.monotonic()
    try:
        msg = refusal(path)
    finally:
        elapsed = time.monotonic() - start
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert elapsed < seconds and peak < megabytes * 2**20, (elapsed, peak)
    return msg


def sweep_file(tmp_path: Path, body: str, name: str = "bad.yaml") -> Path:
    return write_sweep(tmp_path / name, "bad", body)


# ------------------------------------------------------------------------------------------------ YAML read twice
@pytest.mark.parametrize("text, expected", [
    ("name: a\nname: b\n", "name: repeated key (line 1 and 2)"),
    ("name: a\ngrid:\n  rl.lr: [1.0e-4]\n  rl.lr: [2.0e-4]\n", "grid.rl.lr: repeated key (line 3 and 4)"),
    ("name: a\nbase:\n  rl: {lr: 1.0e-4, steps: 3, lr: 2.0e-4}\n", "base.rl.lr: repeated key (line 3)"),
    ("name: a\nexclude:\n  - {rl.lr: 1.0e-4}\n  - {rl.lr: 1.0e-4, rl.lr: 2.0e-4}\n",
     "exclude[1].rl.lr: repeated key (line 4)"),
])
def test_a_repeated_key_is_refused_at_any_depth(tmp_path, text, expected):
    (tmp_path / "dup.yaml").write_text(text)
    msg = refusal(tmp_path / "dup.yaml")
    assert expected in msg and "YAML would keep the last one silently" in msg, msg


# ------------------------------------------------------------------------------------------------ coerced values
@pytest.mark.parametrize("body, expected", [
    ("grid: {rl.steps: [true, 4]}\n", "rl.steps: Value error, must be a number, not true / false"),
    ("grid: {rl.lr: [false]}\n", "rl.lr: Value error, must be a number, not true / false"),
    ("grid: {rl.sfpo.K: [3.5]}\n", "rl.sfpo.K: Input should be a valid integer, got a number with a fractional part"),
    ("seeds: [0, -1]\n", "seeds.1: Input should be greater than or equal to 0 (got -1)"),
    ("seeds: [true]\n", "seeds: Value error, must be a number, not true / false"),
    ("grid: {sft.seed: [-3]}\n", "sft.seed: Input should be greater than or equal to 0 (got -3)"),
    ("grid: {task.split_seed: [4294967296]}\n", "task.split_seed: Input should be less than 4294967296"),
    ("resources: {rl: {threads: true}}\n", "resources.rl.threads: Value error, must be a number, not true / false"),
])
def test_bools_for_numbers_and_out_of_range_seeds_are_refused(tmp_path, body, expected):
    msg = refusal(sweep_file(tmp_path, body))
    assert expected in msg, msg


def test_bools_and_negative_seeds_in_base_and_optuna_are_refused(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text("name: b\nbase: {rl: {group_size: true, lr: true}, eval: {seed: -1}}\n")
    msg = refusal(path)
    assert "base.rl.group_size: Value error, must be a number, not true / false" in msg
    assert "base.rl.lr: Value error, must be a number, not true / false" in msg
    assert "base.eval.seed: Input should be greater than or equal to 0" in msg
    path.write_text("name: b\noptuna:\n  objective: {sql: 'select 1'}\n  n_trials: true\n  sampler: {seed: -2}\n"
                    "  space: {rl.lr: {type: float, low: 1.0e-5, high: 1.0e-3}}\n")
    msg = refusal(path)
    assert "optuna.n_trials: Value error, must be a number, not true / false" in msg
    assert "optuna.sampler.seed: Input should be greater than or equal to 0" in msg


def test_numbers_yaml_writes_in_any_spelling_still_work(tmp_path):
    """1e-4 (a string to YAML), ints for floats, bools for bools: all still accepted."""
    sweep = load_sweep(sweep_file(tmp_path, "grid: {rl.lr: [1e-4, 1], rl.std_norm: [true, false]}\n"))
    assert {(r.config.rl.lr, r.config.rl.std_norm) for r in sweep.runs} == \
        {(1e-4, True), (1e-4, False), (1.0, True), (1.0, False)}


# ------------------------------------------------------------------------------------------------ doing nothing
@pytest.mark.parametrize("body, expected", [
    ("grid: {rl.lr: [1.0e-4, 2.0e-4]}\nexclude: [{rl.lr: 1.0e-4}, {rl.clip_high: 0.2}]\n",
     "exclude[1].rl.clip_high: rl.clip_high is not varied by grid or zip, so this entry matches no grid point"),
    ("grid: {rl.lr: [1.0e-4, 2.0e-4]}\nexclude: [{rl.lr: 3.0e-4}]\n",
     "exclude[0].rl.lr: rl.lr never takes the value 0.0003 (see grid.rl.lr), so this entry matches no grid point"),
    ("zip: {rl.lr: [1.0e-4, 2.0e-4], rl.clip_high: [0.2, 0.3]}\nexclude: [{rl.lr: 1.0e-4, rl.clip_high: 0.3}]\n",
     "exclude[0]: matches no grid point (its values never occur together in one point)"),
])
def test_an_exclude_entry_that_matches_no_grid_point_is_refused(tmp_path, body, expected):
    msg = refusal(sweep_file(tmp_path, body))
    assert expected in msg, msg


@pytest.mark.parametrize("body, expected", [
    ("grid:\n  rl.gxpo.K: {values: [3, 5], when: {rl.update: gxpo}}\n",
     "grid.rl.gxpo.K.when.rl.update: rl.update is not varied and base gives it 'grpo', not 'gxpo', so rl.gxpo.K "
     "would never be varied"),
    ("grid:\n  rl.update: [grpo, sfpo]\n  rl.gxpo.K: {values: [3, 5], when: {rl.update: [gxpo]}}\n",
     "grid.rl.gxpo.K.when.rl.update: rl.update never takes the value ['gxpo'] (see grid.rl.update)"),
    ("grid:\n  rl.kl_coef: {values: [0.1], when: {rl.clip_high: 0.3}}\n"
     "  rl.clip_high: {values: [0.3], when: {rl.std_norm: true}}\n",
     "grid.rl.kl_coef.when.rl.clip_high: rl.clip_high is varied by a later conditional axis of grid"),
    ("zip: {rl.update: [sfpo, gxpo], rl.lr: [1.0e-4, 2.0e-4]}\n"
     "grid:\n  rl.sfpo.K: {values: [2, 4], when: {rl.update: sfpo, rl.lr: 2.0e-4}}\n",
     "grid.rl.sfpo.K.when: its conditions never hold together in one grid point"),
])
def test_a_when_that_never_holds_is_refused(tmp_path, body, expected):
    msg = refusal(sweep_file(tmp_path, body))
    assert expected in msg, msg


@pytest.mark.parametrize("body, expected", [
    ("grid: {rl.lr: [1.0e-4]}\nzip: {rl.lr: [2.0e-4], rl.steps: [4]}\n",
     "zip.rl.lr: rl.lr is also varied by grid.rl.lr; vary a key in one place only"),
    ("zip:\n  - {rl.lr: [1.0e-4], rl.steps: [4]}\n  - {rl.lr: [2.0e-4]}\n",
     "zip[1].rl.lr: rl.lr is also varied by zip[0].rl.lr; vary a key in one place only"),
])
def test_a_key_varied_in_two_places_is_refused(tmp_path, body, expected):
    msg = refusal(sweep_file(tmp_path, body))
    assert expected in msg, msg


# ------------------------------------------------------------------------------------------------ non-finite
@pytest.mark.parametrize("text, expected", [
    ("name: a\nbase: {rl: {lr: .inf}}\n", "base.rl.lr: .inf (line 2) is not a finite number"),
    ("name: a\ngrid: {rl.lr: [1.0e-4, .nan]}\n", "grid.rl.lr[1]: .nan (line 2) is not a finite number"),
    ("name: a\nbase: {engine: {verl: {overrides: {trainer.x: -.inf}}}}\n",
     "base.engine.verl.overrides.trainer.x: -.inf (line 2) is not a finite number"),
    ("name: a\nbase: {rl: {lr: 1e999}}\n", "base.rl.lr: Input should be a finite number (got '1e999')"),
])
def test_non_finite_numbers_are_refused_with_their_key(tmp_path, text, expected):
    (tmp_path / "inf.yaml").write_text(text)
    msg = refusal(tmp_path / "inf.yaml")
    assert expected in msg, msg


# ------------------------------------------------------------------------------------------------ bounded
def test_an_astronomical_grid_is_refused_from_its_size(tmp_path):
    axes = ["rl.lr", "rl.clip_high", "rl.kl_coef", "rl.temperature", "rl.weight_decay", "rl.max_grad_norm"]
    values = ", ".join(f"{0.01 * (i + 1):.2f}" for i in range(50))
    body = "grid:\n" + "".join(f"  {k}: [{values}]\n" for k in axes) + "seeds: [0, 1]\n"
    msg = refused_within_bounds(sweep_file(tmp_path, body))
    assert f"grid: 15,625,000,000 grid points x 2 seed(s) = 31,250,000,000 runs (before exclude); a sweep may make " \
           f"at most {MAX_RUNS:,} runs" in msg, msg


def test_a_conditional_axis_over_the_limit_is_refused_before_it_is_applied(tmp_path):
    lrs = ", ".join(f"{1e-5 * (i + 1):.5f}" for i in range(100))
    kls = ", ".join(f"{1e-3 * (i + 1):.3f}" for i in range(150))
    body = f"grid:\n  rl.lr: [{lrs}]\n  rl.kl_coef: {{values: [{kls}], when: {{rl.update: grpo}}}}\n"
    msg = refused_within_bounds(sweep_file(tmp_path, body))
    assert "grid.rl.kl_coef: 15,000 grid points x 1 seed(s) = 15,000 runs" in msg, msg


def test_a_large_file_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("name: big\ndescription: '" + "x" * (5 * 2**20) + "'\n")
    msg = refused_within_bounds(path, megabytes=20)
    assert f"{path}: {path.stat().st_size:,} bytes; a sweep file may have at most {MAX_FILE_BYTES:,}" in msg


def test_yaml_aliases_are_refused_so_a_billion_laughs_cannot_expand(tmp_path):
    path = tmp_path / "lol.yaml"
    lines = ["name: lol", "grid:", "  rl.lr:", "    - &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"    - &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 10)]  # 10**10 ones
    path.write_text("\n".join(lines) + "\n")
    msg = refused_within_bounds(path)
    assert f"{path}: grid.rl.lr[1][0]: alias *l0 (line 5): a sweep file may not use YAML aliases" in msg, msg
    path.write_text("name: a\nbase:\n  sft: &s {steps: 3}\n  rl: *s\n")  # a harmless alias is refused too
    assert "base.rl: alias *s (line 4)" in refusal(path)


@pytest.mark.slow  # under tracemalloc
@pytest.mark.parametrize("text, expected", [
    ("name: deep\nbase: " + "[" * 100_000 + "]" * 100_000 + "\n", "base[0][0][0]...: nested more than"),
    ("name: deep\n? " + "[" * 100_000 + "]" * 100_000 + "\n: 1\n", "[0][0][0][0]...: nested more than"),
    ("name: deep\nbase:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(60)), "base.k0.k1.k2...: nested"),
])
def test_deep_nesting_is_refused_without_hitting_the_recursion_limit(tmp_path, text, expected):
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    msg = refused_within_bounds(path)
    assert expected in msg and f"a sweep file may nest at most {MAX_DEPTH}" in msg, msg


# ------------------------------------------------------------------------------------------------ dataset files
def test_an_eval_path_that_does_not_exist_is_refused_at_load(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative path is read from the working directory, as the jobs read it
    base = "base:\n  eval: {paths: {math500: data/math500.jsonl}}\n"
    path = write_sweep(tmp_path / "p.yaml", "p", base=base)
    msg = refusal(path)
    assert f"base.eval.paths.math500: 'data/math500.jsonl': file not found (a relative path is read from the " \
           f"working directory, {tmp_path})" in msg, msg
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "math500.jsonl").write_text("{}\n")
    assert len(load_sweep(path).runs) == 1  # (math500 is not evaluated here: the path is only checked)
    grid = write_sweep(tmp_path / "g.yaml", "g", "grid: {eval.paths: [{math500: data/nope.parquet}]}\n")
    assert "grid point {eval.paths: {\"math500\":\"data/nope.parquet\"}, seed: 0}: eval.paths.math500: " \
           "'data/nope.parquet': file not found" in refusal(grid)


# ------------------------------------------------------------------------------------------------ naming keys
def test_unknown_base_keys_get_did_you_mean_and_cross_field_checks_name_their_key(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text("name: b\nbase:\n  evl: {k: 2}\n  rl: {clip_hihg: 0.3, checkpoint_every: 2}\n"
                    "  sft: {stesp: 3}\n")
    msg = refusal(path)
    assert "base.evl: unknown key 'evl' in the run config; did you mean 'eval'?" in msg
    assert "base.rl.clip_hihg: unknown key 'clip_hihg' in rl; did you mean 'clip_high'?" in msg
    assert "base.sft.stesp: unknown key 'stesp' in sft; did you mean 'steps'?" in msg
    path.write_text("name: b\nbase:\n  rl: {checkpoint_every: 2}\n  eval: {every: 3}\n")
    assert f"{path}: base.eval.every: 3 must be a multiple of rl.checkpoint_every (2)" in refusal(path)
    path.write_text("name: b\nbase:\n  eval: {benchmarks: [math500]}\n")
    assert f"{path}: base.eval.benchmarks: ['math500']: the local engine's tiny" in refusal(path)
    path.write_text("name: b\nbase:\n  model: {hidden: 30, n_heads: 4}\n  rl: {gxpo: {clamp_min: 2, clamp_max: 1}}\n")
    msg = refusal(path)
    assert "base.model.hidden: 30 must be divisible by n_heads (4)" in msg
    assert "base.rl.gxpo.clamp_min: 2.0 must be <= clamp_max (1.0)" in msg


# ------------------------------------------------------------------------------------------------ the front ends
BAD = {  # one file per class, for the command line
    "dup.yaml": "name: a\nseeds: [0]\nseeds: [1]\n",
    "deep.yaml": "name: a\nbase: " + "[" * 100_000 + "]" * 100_000 + "\n",
    "bool.yaml": "name: a\nbase: {rl: {steps: true}}\n",
    "inf.yaml": "name: a\nbase: {rl: {lr: -.inf}}\n",
    "exclude.yaml": "name: a\ngrid: {rl.lr: [1.0e-4]}\nexclude: [{rl.lr: 2.0e-4}]\n",
}
EXPECTED = {
    "dup.yaml": "seeds: repeated key (line 2 and 3)",
    "deep.yaml": "base[0][0][0]...: nested more than 50 levels deep",
    "bool.yaml": "base.rl.steps: Value error, must be a number, not true / false",
    "inf.yaml": "base.rl.lr: -.inf (line 2) is not a finite number",
    "exclude.yaml": "exclude[0].rl.lr: rl.lr never takes the value 0.0002 (see grid.rl.lr)",
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_rlsweep_validate_refuses_without_a_traceback(tmp_path, name):
    (tmp_path / name).write_text(BAD[name])
    res = run_cli("validate", str(tmp_path / name), timeout=60)
    assert res.returncode == 2, res.stderr
    assert f"error: {tmp_path / name}: {EXPECTED[name]}" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr + res.stdout


@pytest.mark.slow  # Snakemake
def test_snakemake_refuses_a_bad_sweep_before_any_job_without_a_traceback(tmp_path):
    bad = tmp_path / "deep.yaml"
    bad.write_text(BAD["deep.yaml"])
    res = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--snakefile", str(REPO / "Snakefile"),
                          "--cores", "1", "--config", f"sweep={bad}"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode != 0
    assert f"{bad}: {EXPECTED['deep.yaml']}" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and 'File "' not in res.stderr, res.stderr  # nor Snakemake's frame line
    assert not (tmp_path / "results").exists()


@pytest.mark.slow  # seconds of work (Snakemake runs, every shipped sweep): the fast tier stays under 2 min
def test_the_shipped_sweeps_pass_every_check():
    for path in sorted((REPO / "sweeps").glob("*.yaml")):
        load_sweep(path)


def test_a_sweep_written_by_rlsweep_reads_back_even_when_a_value_is_shared(tmp_path):
    """`rlsweep smoke` writes sweeps: PyYAML's default dump turns a shared value into an alias, which is refused."""
    shared = {"steps": 4}
    sweep = {"name": "t", "base": {"sft": shared, "rl": shared}}
    assert "*" not in dump_yaml(sweep)
    path = tmp_path / "t.yaml"
    path.write_text(dump_yaml(sweep))
    assert load_yaml(path) == {"name": "t", "base": {"sft": {"steps": 4}, "rl": {"steps": 4}}}
