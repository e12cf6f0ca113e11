"""Optuna studies through Snakemake, end to end on the tiny settings: trials run as ordinary runs with `in_flight`
of them at once, land in `runs` with their parameters and objective values, a killed driver's study continues
with the same command and trains no trial twice, and a trial whose job dies is marked failed while the study
goes on.

CI runs one study, the one with pruning (issue 58: each real component once in CI); it also checks what every
study does: trials as rows of `runs` with their parameters and values, `status`, and a second run that does nothing.
The other studies are long tests with recorded passes (docs/tests.md), each a study of its own since it kills, fails
or scores its trials differently."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml

from helpers import REPO, TINY_BASE, cli, files_naming, write_sweep
from workflow.layout import stage_dir, store_dir, trial_log
from workflow.results.catalog import query
from workflow.study.factory import make_storage

pytestmark = pytest.mark.slow  # not in the fast tier: Optuna studies through Snakemake
# what the long studies below cover (scripts/long_tests.py --stale): the driver and its rule; the stages their trials
# run, and the rows they land in, are CI's everywhere else
STUDY_CODE = ["workflow/study/", "rules/study.smk"]

# entropy varies from run to run even where the tiny models solve nothing, so the values mean something here
ENTROPY = "SELECT run_id, avg(entropy) AS value FROM train_steps WHERE stage = 'rl' GROUP BY run_id"
SPACE = {"rl.update": {"type": "categorical", "choices": ["sfpo", "gxpo"]},
         "rl.sfpo.K": {"type": "int", "low": 1, "high": 3, "when": {"rl.update": "sfpo"}},
         "rl.sfpo.alpha": {"type": "float", "low": 0.1, "high": 1.0, "when": {"rl.update": "sfpo"}},
         "rl.gxpo.alpha": {"type": "float", "low": 0.1, "high": 1.0, "when": {"rl.update": "gxpo"}},
         "rl.gxpo.tau": {"type": "float", "low": 0.5, "high": 4.0, "log": True, "when": {"rl.update": "gxpo"}}}


def study_sweep(tmp_path: Path, n_trials: int, in_flight: int, name: str = "study") -> Path:
    block = {"objective": {"sql": ENTROPY}, "sampler": {"name": "random", "seed": 0}, "n_trials": n_trials,
             "in_flight": in_flight, "space": SPACE}
    return write_sweep(tmp_path / f"{name}.yaml", name, yaml.safe_dump({"optuna": block}, sort_keys=False))


def snakemake_argv(sweep: Path) -> list[str]:
    return [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores", "2",
            "--config", f"sweep={sweep}"]


def load(tmp_path: Path, sweep: Path) -> optuna.Study:
    from workflow.sweep.expand import load_sweep
    s = load_sweep(sweep)
    return optuna.load_study(study_name=s.name, storage=make_storage(s.spec.optuna, tmp_path / "results", s.name))


def rl_steps(tmp_path: Path, name: str) -> dict[str, list[int]]:
    rows = query("SELECT run_id, step FROM train_steps WHERE stage = 'rl' ORDER BY run_id, step",
                 tmp_path / "results", name).to_pylist()
    out: dict[str, list[int]] = {}
    for r in rows:
        out.setdefault(r["run_id"], []).append(r["step"])
    return out


@pytest.mark.long(covers=STUDY_CODE)
def test_a_study_keeps_its_trials_in_flight_and_records_them_as_runs(tmp_path):
    sweep = study_sweep(tmp_path, n_trials=4, in_flight=2)
    res = subprocess.run(snakemake_argv(sweep), cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    study = load(tmp_path, sweep)
    trials = study.get_trials()
    assert [t.number for t in trials] == list(range(4))
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    for t in trials:  # conditional space: only the chosen rule's keys were sampled
        other = "gxpo" if t.params["rl.update"] == "sfpo" else "sfpo"
        assert not any(k.startswith(f"rl.{other}.") for k in t.params)

    # every trial's runs are rows of `runs` with the trial's parameters and objective value
    rows = {r["run_id"]: r for r in query("SELECT * FROM runs WHERE stage = 'rl'", tmp_path / "results",
                                          "study").to_pylist()}
    entropy = {r["run_id"]: r["value"] for r in query(ENTROPY, tmp_path / "results", "study").to_pylist()}
    for t in trials:
        (run_id,) = t.user_attrs["run_ids"]
        row = rows[run_id]
        if row["trial"] == t.number:  # (a repeated proposal is served by the run of the trial that trained it)
            assert row["trial_state"] == "complete" and row["objective"] == pytest.approx(t.value)
        assert t.value == pytest.approx(entropy[run_id])
        assert row["rl_update"] == t.params["rl.update"] and row["status"] == "completed"
        rule = t.params["rl.update"]
        for key, value in t.params.items():
            if key.startswith(f"rl.{rule}."):
                assert row[key.replace(".", "_")] == pytest.approx(value)
    assert {r["trial"] for r in rows.values()} <= set(range(4)) and len(rows) >= 3

    # a new trial starts as soon as one finishes, never more than in_flight at once
    in_flight = [int(n) for n in re.findall(r"started \((\d+) in flight\)", res.stderr)]
    assert len(in_flight) == 4 and max(in_flight) == 2
    spans = [(t.datetime_start, t.datetime_complete) for t in trials]
    for start, _ in spans:
        assert sum(s <= start < e for s, e in spans) <= 2
    for start, _ in spans[2:]:  # each later trial was asked within seconds of a trial completing
        assert min(abs((start - e).total_seconds()) for _, e in spans if e <= start + dt.timedelta(seconds=1)) < 5

    status = cli("status", str(sweep), "--results", str(tmp_path / "results"))
    assert status.returncode == 0 and "4/4 complete" in status.stderr, status.stderr
    assert (tmp_path / "results" / "study" / "summary.md").is_file()
    # no machine path under results/ (issue 80): the trial logs write the directory the sweep ran from as `.`, the
    # checkout's as `<rlsweep>` (and an absolute results directory as `<results>`)
    assert files_naming(tmp_path / "results", tmp_path, REPO) == []
    log = trial_log(tmp_path / "results", "study", 0).read_text()
    assert "Working directory: ." in log and "-s <rlsweep>/Snakefile" in log, log[:2000]
    again = subprocess.run(snakemake_argv(sweep), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    assert len(load(tmp_path, sweep).trials) == 4


@pytest.mark.long(covers=STUDY_CODE)
def test_killing_the_driver_then_the_same_command_finishes_the_study_training_nothing_twice(tmp_path):
    sweep = study_sweep(tmp_path, n_trials=4, in_flight=2)
    proc = subprocess.Popen(snakemake_argv(sweep), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    journal = tmp_path / "results" / "study" / "optuna.journal"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # kill once two trials are done and others are under way
        if journal.is_file():
            states = [t.state for t in load(tmp_path, sweep).trials]
            if states.count(optuna.trial.TrialState.COMPLETE) >= 2 and optuna.trial.TrialState.RUNNING in states:
                break
        time.sleep(0.5)
    else:
        pytest.fail("the study never got going")
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: snakemake, the driver, the trials' snakemakes and their jobs
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    before = load(tmp_path, sweep).trials
    left_running = [t.number for t in before if t.state == optuna.trial.TrialState.RUNNING]
    assert left_running, out[-2000:]
    finished = {r: (p / "DONE.json").stat().st_mtime_ns for p in (store_dir(tmp_path / "results") / "rl").iterdir()
                if (p / "DONE.json").is_file() for r in [p.name]}

    res = subprocess.run(snakemake_argv(sweep), cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"resuming {len(left_running)} trial(s)" in res.stderr
    trials = load(tmp_path, sweep).trials
    assert [t.number for t in trials] == list(range(4))  # nothing asked twice, nothing more than n_trials
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    for t in before:  # the resumed trials kept their parameters
        assert trials[t.number].params == t.params
    for run_id, mtime in finished.items():  # RL runs finished before the kill were not trained again
        assert (stage_dir(tmp_path / "results", "rl", run_id) / "DONE.json").stat().st_mtime_ns == mtime
    steps = rl_steps(tmp_path, "study")
    assert steps and all(s == [1, 2, 3, 4] for s in steps.values()), steps  # every step exactly once


@pytest.mark.long(covers=STUDY_CODE)
def test_a_trial_whose_job_dies_is_failed_and_the_study_goes_on(tmp_path):
    sweep = study_sweep(tmp_path, n_trials=3, in_flight=1)
    proc = subprocess.Popen(snakemake_argv(sweep), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    killed, deadline = None, time.monotonic() + 600
    while killed is None and time.monotonic() < deadline:  # the first RL job dies as on a lost node
        ps = subprocess.run(["pgrep", "-s", str(proc.pid), "-f", "stage.py rl "], capture_output=True, text=True)
        if ps.stdout.split():
            killed = int(ps.stdout.split()[0])
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.2)
    assert killed, "no RL job appeared"
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    trials = load(tmp_path, sweep).trials
    states = [t.state for t in trials]
    # as in Optuna's own optimize(n_trials=...), a failed trial counts: the study asked 2 more, not 3
    assert states == [optuna.trial.TrialState.FAIL] + [optuna.trial.TrialState.COMPLETE] * 2
    assert "its jobs failed" in trials[0].user_attrs["error"] and "trial_00000.log" in trials[0].user_attrs["error"]
    again = subprocess.run(snakemake_argv(sweep), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and len(load(tmp_path, sweep).trials) == 3  # the failed trial is not retried


# an objective read from the evals (no eval rows -> no value), lower for SFPO: the median pruner stops SFPO trials
# at their first intermediate eval once a GXPO trial has reported
EVAL_GATED = ("SELECT s.run_id, max(s.avg_at_k) + max(CASE WHEN r.rl_update = 'sfpo' THEN 0.0 ELSE 1.0 END) AS value "
              "FROM eval_scores s JOIN runs r ON r.run_id = s.run_id AND r.stage = 'rl' GROUP BY s.run_id")


def test_a_trial_worse_than_the_median_at_an_intermediate_eval_is_pruned_and_stops_early(tmp_path):
    """Issue 61: a trial's runs (two seeds) advance one segment at a time; after the step-2 evaluation the driver
    reports the seeds' mean and the pruner decides before the next segment is submitted: a pruned trial's segment
    of steps 3-4 never runs, and its runs are `pruned` in `runs`."""
    base = TINY_BASE.replace("eval: {k: 2, max_new_tokens: 16}", "eval: {k: 2, max_new_tokens: 16, every: 2}")
    block = {"objective": {"sql": EVAL_GATED}, "sampler": {"name": "random", "seed": 0}, "n_trials": 4,
             "in_flight": 1, "pruner": {"name": "median", "options": {"n_startup_trials": 1}},
             "space": {k: v for k, v in SPACE.items() if k in ("rl.update", "rl.sfpo.K")}}
    sweep = write_sweep(tmp_path / "pruned.yaml", "pruned", yaml.safe_dump({"seeds": [0, 1], "optuna": block},
                                                                         sort_keys=False), base=base)
    res = subprocess.run(snakemake_argv(sweep), cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    trials = load(tmp_path, sweep).trials
    first_gxpo = next(t.number for t in trials if t.params["rl.update"] == "gxpo")
    expect_pruned = [t.number for t in trials if t.params["rl.update"] == "sfpo" and t.number > first_gxpo]
    assert expect_pruned, [t.params for t in trials]  # the seed gives the test something to prune
    steps = rl_steps(tmp_path, "pruned")
    rows = {r["run_id"]: r for r in query("SELECT * FROM runs WHERE stage = 'rl'", tmp_path / "results",
                                          "pruned").to_pylist()}
    evals = query("SELECT DISTINCT run_id, step FROM eval_scores", tmp_path / "results", "pruned").to_pylist()
    gated = {r["run_id"]: r["value"] for r in query(EVAL_GATED.replace("max(s.avg_at_k)", "max(s.avg_at_k) FILTER "
                                                                       "(WHERE s.step = 2)"),
                                                    tmp_path / "results", "pruned").to_pylist()}
    seen: dict[tuple, optuna.trial.FrozenTrial] = {}
    for t in trials:
        run_ids = tuple(t.user_attrs["run_ids"])
        assert len(run_ids) == 2  # a trial is its two seeds
        if run_ids in seen:  # a repeated proposal: served by the earlier trial's runs, pruned again without training
            assert t.state == seen[run_ids].state and not t.intermediate_values
            continue
        seen[run_ids] = t
        # every trial that trained reported its step-2 evaluation: the mean over its two seeds
        assert t.intermediate_values[2] == pytest.approx(sum(gated[r] for r in run_ids) / 2)
        for run_id in run_ids:
            if t.number in expect_pruned:
                assert t.state == optuna.trial.TrialState.PRUNED
                assert steps[run_id] == [1, 2]  # stopped after its first segment: the second never ran
                assert rows[run_id]["status"] == "pruned" and rows[run_id]["trial_state"] == "pruned"
                assert {e["step"] for e in evals if e["run_id"] == run_id} == {2}
            else:
                assert t.state == optuna.trial.TrialState.COMPLETE and steps[run_id] == [1, 2, 3, 4]
                assert {e["step"] for e in evals if e["run_id"] == run_id} == {2, 4}
                # a trial is a row of `runs`: its state, value and parameters (the flattened columns)
                assert rows[run_id]["trial_state"] == "complete"
                assert rows[run_id]["objective"] == pytest.approx(t.value)
            assert rows[run_id]["rl_update"] == t.params["rl.update"]
            if "rl.sfpo.K" in t.params:
                assert rows[run_id]["rl_sfpo_K"] == t.params["rl.sfpo.K"]
    counts = {s: sum(t.state == s for t in trials) for s in optuna.trial.TrialState}
    status = cli("status", str(sweep), "--results", str(tmp_path / "results"))
    assert status.returncode == 0, status.stderr
    assert (f"{counts[optuna.trial.TrialState.COMPLETE]}/4 complete, 0 running, 0 failed, "
            f"{counts[optuna.trial.TrialState.PRUNED]} pruned") in " ".join(status.stderr.split()), status.stderr
    again = subprocess.run(snakemake_argv(sweep), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr  # no trial asked again
    assert len(load(tmp_path, sweep).trials) == 4


def test_validate_shows_the_study_plan_without_running_anything(tmp_path):
    res = cli("validate", str(REPO / "sweeps" / "optuna_sfpo_gxpo.yaml"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert all(k in res.stdout for k in ("rl.sfpo.K", "rl.gxpo.tau", "[0.5, 4.0] log", "rl.update=gxpo"))
    assert "24 trials, 2 at once; maximize avg_at_k" in " ".join(res.stderr.split())
    assert not (tmp_path / "results").exists()


def test_trials_get_the_outer_runs_executor_profile_and_jobs_not_its_targets():
    from workflow.study.nested import nested_snakemake_args
    argv = ["snakemake", "--profile", "profiles/slurm", "-j=5", "--config", "sweep=x.yaml", "--executor",
            "rlsweep-slurm", "--seconds-between-status-checks", "2", "--dry-run", "results/x/summary.md"]
    assert nested_snakemake_args(argv) == ("--profile profiles/slurm -j=5 --executor rlsweep-slurm "
                                           "--seconds-between-status-checks 2")


@pytest.mark.long(covers=STUDY_CODE)
def test_a_multi_objective_study_tells_one_value_per_direction(tmp_path):
    sql = ("SELECT run_id, avg(entropy) AS entropy, avg(grad_norm) AS grad_norm FROM train_steps "
           "WHERE stage = 'rl' GROUP BY run_id")
    block = {"objective": {"sql": sql}, "directions": ["maximize", "minimize"], "sampler": {"name": "random",
             "seed": 0}, "n_trials": 2, "in_flight": 2, "space": {"rl.lr": {"type": "float", "low": 1e-5,
                                                                            "high": 1e-2, "log": True}}}
    sweep = write_sweep(tmp_path / "mo.yaml", "mo", yaml.safe_dump({"optuna": block}, sort_keys=False))
    res = subprocess.run(snakemake_argv(sweep), cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    expected = {r["run_id"]: [r["entropy"], r["grad_norm"]] for r in query(sql, tmp_path / "results",
                                                                              "mo").to_pylist()}
    rows = {r["run_id"]: r for r in query("SELECT * FROM runs WHERE stage = 'rl'", tmp_path / "results",
                                          "mo").to_pylist()}
    for t in load(tmp_path, sweep).trials:
        (run_id,) = t.user_attrs["run_ids"]
        assert t.state == optuna.trial.TrialState.COMPLETE and t.values == pytest.approx(expected[run_id])
        assert json.loads(rows[run_id]["objectives"]) == pytest.approx(t.values)
    status = cli("status", str(sweep), "--results", str(tmp_path / "results"))
    assert status.returncode == 0 and "2/2 complete" in status.stderr
