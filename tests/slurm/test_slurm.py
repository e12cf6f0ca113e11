"""Against a real SLURM (scripts/local_slurm.sh: one node on loopback, fake GPUs, slurmdbd): sweeps run through
`snakemake --profile profiles/slurm`, a running RL job survives a preemption signal and a hard requeue with every
step recorded once and the weights of an uninterrupted run, and a job that fails for good is reported with its
log while the rest of the DAG goes on.

The cluster: an answering `sinfo` is used as it is; otherwise, as root, the fixture starts the project's local
cluster (MaxArraySize 3, so arrays split) and stops it afterwards. Without either the tests skip, unless
RLSWEEP_REQUIRE_SLURM=1 (CI), where that is a failure.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import REPO, SECOND_IS_WORSE, TINY_BASE, run_cli, write_sweep
from workflow.launch import run_stage
from workflow.layout import stage_dir
from workflow.slurm import cluster
from workflow.sweep.expand import load_sweep

# CI runs one sweep through the profile, its RL job preempted and requeued, and plain shell rules (one of them failing for
# good: reported with its state and log while the rest goes on); the rest are long tests since issue 58 (CI under 35
# minutes), their logic tested in CI without a cluster: the step-0 copy in test_workflow_e2e.py, Optuna studies in
# test_study.py, the SLURM commands' retries and give-up in test_slurm_units.py, segments and their evaluations in
# tests/e2e/test_segments.py, a failed stage's row in `runs` in tests/unit/engines/test_engine.py. What the long
# tests here cover (scripts/long_tests.py --stale):
SLURM_CODE = ["workflow/slurm/", "snakemake_executor_plugin_rlsweep_slurm/", "profiles/slurm/", "scripts/local_slurm.sh",
              "workflow/preemption.py", "workflow/launch.py"]

pytestmark = [pytest.mark.slurm, pytest.mark.serial("slurm"), pytest.mark.slow]


def _answers() -> bool:
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module")
def slurm():
    started = False
    if not _answers():
        why = None if os.geteuid() == 0 and shutil.which("apt-get") else "needs root and apt-get to start one"
        if why is None:
            out = subprocess.run([str(REPO / "scripts" / "local_slurm.sh"), "start"], capture_output=True,
                                 text=True, env={**os.environ, "RLSWEEP_SLURM_MAX_ARRAY_SIZE": "3"}, timeout=600)
            why = None if out.returncode == 0 else f"local_slurm.sh start failed:\n{out.stdout}\n{out.stderr}"
            started = out.returncode == 0
        if why:
            if os.environ.get("RLSWEEP_REQUIRE_SLURM") == "1":
                pytest.fail(f"no SLURM cluster: {why}")
            pytest.skip(f"no SLURM cluster: {why}")
    cluster.max_array_size.cache_clear()
    yield
    if started:
        subprocess.run([str(REPO / "scripts" / "local_slurm.sh"), "stop"], capture_output=True, timeout=120)


def snakemake_slurm(workdir: Path, sweep: Path, *extra: str, background: bool = False):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--profile",
           str(REPO / "profiles" / "slurm"), "-d", str(workdir), "--config", f"sweep={sweep}",
           "--seconds-between-status-checks", "2", *extra]
    if background:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def runs_rows(results: Path, where: str = "true") -> list[dict]:
    out = run_cli("--results", str(results), "query", f"select * from runs where {where} order by stage",
                  "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def sacct_field(job_id: str, field: str) -> str:
    return cluster.run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", field]).strip()


CPU_JOBS = """
resources:
  sft: {gpus_per_node: 0, time: "00:10:00"}
  rl: {gpus_per_node: 1, time: "00:10:00"}
  eval: {gpus_per_node: 0, time: "00:10:00"}
"""


@pytest.mark.long(covers=[*SLURM_CODE, "workflow/segments.py"])
def test_a_run_in_segments_evaluates_each_step_while_the_next_segment_trains(slurm, tmp_path):
    """Issue 47 on SLURM: a 60-step run evaluated every 20 steps trains as 3 segment jobs, each its own SLURM job
    with the sweep's time limit; the evaluation of step 20 is a SLURM job of its own that finishes before the
    segment that trains steps 21-40 does (sacct's timestamps), so evaluating no longer waits for the whole run.
    (Steps of 16 x 8 rollouts of 48 tokens, so that a segment outlasts an evaluation: with the tests' usual 4 x 4
    rollouts of 16 tokens both took ~5 s, most of it starting Python.)"""
    sweep = write_sweep(tmp_path / "seg.yaml", "seg", CPU_JOBS)
    sweep.write_text(sweep.read_text().replace("eval: {k: 2, max_new_tokens: 16}",
                                               "eval: {k: 2, max_new_tokens: 16, every: 20}")
                     .replace("rl: {steps: 4, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, checkpoint_every: 2}",
                              "rl: {steps: 60, prompts_per_step: 16, group_size: 8, max_new_tokens: 48, "
                              "checkpoint_every: 20}"))
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))
    res = snakemake_slurm(tmp_path, sweep)
    assert res.returncode == 0, res.stderr[-4000:]
    jobs = {}
    for line in cluster.run(["sacct", "-X", "-n", "-P", "-S", since, "-o",
                             "JobName,Start,End,Timelimit,State"]).splitlines():
        name, start, end, limit, state = line.split("|")
        jobs[name] = {"start": start, "end": end, "limit": limit, "state": state}
    [run] = load_sweep(sweep).runs
    segment = {end: jobs[f"rlsweep-rl-{run.run_id}_{end}"] for end in (20, 40, 60)}
    assert all(j["state"] == "COMPLETED" and j["limit"] == "00:10:00" for j in segment.values()), segment
    [eval20] = [j for name, j in jobs.items() if name.startswith(f"rlsweep-eval-{run.run_id}_{run.eval_id}_20_")]
    # ISO timestamps to the second, compared as strings
    assert segment[20]["end"] <= eval20["start"] and eval20["end"] < segment[40]["end"], (eval20, segment)
    rows = runs_rows(tmp_path / "results", "stage = 'rl'")
    assert len(rows) == 1 and rows[0]["status"] == "completed"  # one row for the run, across its segments


@pytest.mark.long(covers=SLURM_CODE)
def test_shared_step0_evaluations_copy_on_the_submitting_machine(slurm, tmp_path):
    """eval.at_start with two seeds through the SLURM profile: the start is evaluated by one SLURM job, the other
    run's step-0 job is the local rule eval_copy (no SLURM job, no GPU asked for a copy) with the same scores."""
    sweep = write_sweep(tmp_path / "s0.yaml", "s0", CPU_JOBS + "seeds: [0, 1]\n")
    sweep.write_text(sweep.read_text().replace("eval: {k: 2, max_new_tokens: 16}",
                                               "eval: {k: 2, max_new_tokens: 16, at_start: true}"))
    res = snakemake_slurm(tmp_path, sweep)
    assert res.returncode == 0, res.stderr[-4000:]
    evals = runs_rows(tmp_path / "results", "stage = 'eval'")
    assert len(evals) == 4 and {r["status"] for r in evals} == {"completed"}  # 2 runs x (step 0, final)
    copies = [r for r in evals if r["backend"] == "copy"]
    assert len(copies) == 1 and copies[0]["slurm_job_id"] is None, copies  # ran by snakemake itself
    assert all(r["slurm_job_id"] for r in evals if r["backend"] != "copy")
    out = run_cli("--results", str(tmp_path / "results"), "query", "select run_id, avg_at_k from eval_scores "
                  "where step = 0 and k = 1", "--format", "json")
    starts = json.loads(out.stdout)
    assert len(starts) == 2 and starts[0]["avg_at_k"] == starts[1]["avg_at_k"]


def _wait(predicate, what: str, proc: subprocess.Popen, timeout: float = 600):
    """Poll `predicate` while snakemake runs. The bound is generous: the tests run beside a verl job on two cores
    (pytest-xdist), which slows these CPU jobs 2-4x (240 s was once too short for SFT + 5 RL steps)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            pytest.fail(f"snakemake ended while waiting for {what}:\n{proc.stdout.read()[-4000:]}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


REQUEUE_BASE = """
base:
  model: {n_layers: 2, hidden: 64, n_heads: 4}
  task: {n_heldout: 16, two_step_fraction: 1.0}
  sft: {steps: 300, batch_size: 64, checkpoint_every: 300}
  rl: {steps: 60, prompts_per_step: 8, group_size: 8, max_new_tokens: 20, checkpoint_every: 5, segment_steps: 0}
  eval: {k: 1, max_new_tokens: 16, every: 15}
"""


@pytest.mark.timeout(1800)
def test_a_sweep_through_the_profile_survives_preemption_and_requeue_exactly_with_provenance_and_arrays(
        slurm, tmp_path, sft_for_rl):
    """CI's one SLURM sweep (issue 58): RL and its evaluations as SLURM jobs through `--profile profiles/slurm`. The
    running RL job gets a preemption signal (it checkpoints off-interval and is requeued) and then a hard requeue
    (killed, resumed from its last periodic checkpoint): every step recorded once and the weights of an uninterrupted
    run. Its 4 checkpoints are evaluated after it (segment_steps 0): 4 eval jobs ready at once go as job arrays no
    larger than MaxArraySize. Every row says where it ran, what SLURM allocated and how long it took."""
    sweep = write_sweep(tmp_path / "rq.yaml", "rq", CPU_JOBS, base=REQUEUE_BASE)
    run = load_sweep(sweep).runs[0]
    # the SFT it starts from is the session's shared one (helpers.SFT_FOR_RL), put in the store as another sweep's
    # finished stage: Snakemake reuses it and submits only RL and eval (the shell-rule test below submits its own)
    assert sft_for_rl.parent.name == run.sft_id, "REQUEUE_BASE's SFT must be helpers.SFT_FOR_RL's"
    shutil.copytree(sft_for_rl.parent, stage_dir(tmp_path / "results", "sft", run.sft_id))
    run_dir = stage_dir(tmp_path / "results", "rl", run.run_id)
    ckpts = run_dir / "checkpoints"
    lock = run_dir / "RUNNING.lock"

    def newest() -> int:
        found = [int(p.name[5:]) for p in ckpts.glob("step_*")] if ckpts.is_dir() else []
        return max(found, default=0)

    def restarts() -> int:
        try:
            return json.loads(lock.read_text())["restart_count"]
        except (OSError, ValueError, KeyError):
            return -1

    proc = snakemake_slurm(tmp_path, sweep, background=True)
    _wait(lambda: newest() >= 5 and restarts() == 0, "the RL job's first checkpoint", proc)
    job = lambda: json.loads(lock.read_text())["slurm_job_id"]  # noqa: E731
    job_id = job()

    # 1. preemption / time-limit warning, as SLURM sends it: the stage checkpoints off-interval and is requeued
    cluster.run(["scancel", "--signal=USR2", job_id])
    _wait(lambda: restarts() == 1 and newest() % 5 == 0 and newest() > 10, "the requeued job's next checkpoint", proc)
    # 2. a hard requeue (node failure, admin): killed, requeued, resumes from its last periodic checkpoint
    assert newest() < 60, "the run finished before the hard requeue; the test proved nothing"
    cluster.run(["scontrol", "requeue", job_id])
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]
    assert (tmp_path / "results" / "rq" / "summary.md").is_file()

    log = next((tmp_path / ".snakemake" / "slurm").glob(f"{job_id}/{job_id}_0_log.out")).read_text()
    stopped = int(re.search(r"after checkpointing step (\d+)", log).group(1))
    assert "requeued run #1" in log and "requeued run #2" in log
    assert "rlsweep: stage stopped" in log  # the requeue followed the checkpoint, not the end of the grace period
    assert (ckpts / f"step_{stopped:06d}").is_dir()

    rows = runs_rows(tmp_path / "results", "stage in ('rl', 'eval')")
    assert sorted(r["stage"] for r in rows) == ["eval"] * 4 + ["rl"]
    rl = [r for r in rows if r["stage"] == "rl"]
    assert [(r["status"], r["requeue_count"], r["slurm_job_id"]) for r in rl] == [("completed", 2, job_id)]
    assert rl[0]["slurm_attempts"] == 3  # sacct's record of each attempt, the two requeued ones included
    evals = [r for r in rows if r["stage"] == "eval"]
    assert sorted(r["eval_step"] for r in evals) == [15, 30, 45, 60]
    for r in rows:  # every stage ran as a SLURM job and says where
        jid = r["slurm_job_id"] + (f"_{r['slurm_array_index']}" if r["slurm_array_index"] is not None else "")
        assert r["status"] == "completed" and r["slurm_job_id"] and r["slurm_node"] and r["slurm_partition"]
        assert r["git_sha"] and r["git_dirty"] is not None
        assert sacct_field(jid, "State") == "COMPLETED"
        # SLURM's accounting in runs: elapsed when the stage ended x allocated GPUs
        assert r["slurm_gpus"] == (1 if r["stage"] == "rl" else 0)
        # (every attempt's time, the requeued ones' included; the job ran on a little after the stage ended)
        attempts = cluster.run(["sacct", "-D", "-X", "-n", "-P", "-j", jid, "-o", "ElapsedRaw"]).split()
        assert len(attempts) == r["slurm_attempts"] and 0 <= r["slurm_elapsed_s"] <= sum(map(int, attempts))
        assert r["gpu_hours"] == pytest.approx(r["slurm_elapsed_s"] * r["slurm_gpus"] / 3600)
    assert all(r["requeue_count"] == 0 and r["slurm_attempts"] == 1 for r in evals)
    size = cluster.max_array_size()
    assert len({r["slurm_job_id"] for r in evals}) == math.ceil(4 / size)  # one array, or split to MaxArraySize
    assert sum(r["slurm_array_index"] is not None for r in evals) >= min(4, size)  # (a 1-job rest goes alone)
    assert all(r["slurm_array_index"] is None or r["slurm_array_index"] < size for r in evals)
    assert "gres/gpu=1" in sacct_field(job_id, "AllocTRES")  # the stage's resources reached SLURM
    assert sacct_field(job_id, "Timelimit") == "00:10:00"
    assert rl[0]["slurm_elapsed_s"] >= 1 and rl[0]["gpu_hours"] > 0
    report = (tmp_path / "results" / "rq" / "report" / "report.md").read_text()
    assert "GPU-hours RL + eval (SLURM)" in report
    steps = run_cli("--results", str(tmp_path / "results"), "query",
                    "select step from train_steps where stage = 'rl' order by step", "--format", "json")
    assert [r["step"] for r in json.loads(steps.stdout)] == list(range(1, 61))  # each step exactly once

    # the same run uninterrupted, from the same SFT checkpoint, in this process
    torch.set_num_threads(1)
    sft_done = stage_dir(tmp_path / "results", "sft", run.sft_id) / "DONE.json"
    ref = run_stage("rl", "rq", run.run_id, run.stage_config("rl"), results_root=tmp_path / "ref", init=sft_done)

    def weights(done: Path) -> dict[str, torch.Tensor]:
        return load_file(done.parent / json.loads(done.read_text())["checkpoint"] / "model.safetensors")
    got, want = weights(run_dir / "DONE.json"), weights(ref)
    init = weights(sft_done)
    assert any(not torch.equal(want[k], init[k]) for k in want), "RL did not change the weights"
    assert all(torch.equal(want[k], got[k]) for k in want)


@pytest.mark.long(covers=SLURM_CODE)
def test_a_job_that_fails_for_good_is_reported_with_its_log_and_the_rest_goes_on(slurm, tmp_path):
    # eval.backend vllm passes validation on the login node, but this compute node has no GPU/vLLM: the job fails
    sweep = write_sweep(tmp_path / "bad.yaml", "bad", CPU_JOBS + "grid:\n  eval.backend: [local, vllm]\n")
    res = snakemake_slurm(tmp_path, sweep)
    assert res.returncode != 0
    m = re.search(r"SLURM job (\S+) failed: state FAILED[^\n]*\. Log: (\S+)", res.stderr)
    assert m, res.stderr[-4000:]
    assert "eval.backend is vllm, but vllm is not installed" in Path(m.group(2)).read_text()
    rows = runs_rows(tmp_path / "results")
    status = sorted((r["stage"], r["status"]) for r in rows)
    # SFT, RL and the local-backend eval completed; only the vLLM eval failed (and the summary that needs it)
    assert status == [("eval", "completed"), ("eval", "failed"), ("rl", "completed"), ("sft", "completed")]
    assert not (tmp_path / "results" / "bad" / "summary.md").exists()


@pytest.mark.long(covers=[*SLURM_CODE, "workflow/study/", "rules/study.smk", "workflow/segments.py"])
def test_an_optuna_studys_trials_run_as_slurm_jobs_and_one_is_pruned_between_its_segments(slurm, tmp_path):
    """The study driver runs where snakemake runs; each trial's nested snakemake gets the profile, so the trials'
    stages are SLURM jobs (sharing one SFT job). Issue 61: with a pruner, each trial's runs advance one segment at a
    time; the second trial, worse at its step-2 evaluation, is pruned there: its second segment is never submitted."""
    import optuna
    from workflow.study.factory import make_storage
    block = (f"optuna:\n  objective: {{sql: \"{SECOND_IS_WORSE}\"}}\n"
             "  sampler: {name: random, seed: 0}\n  n_trials: 2\n  in_flight: 1\n"
             "  pruner: {name: median, options: {n_startup_trials: 1}}\n"
             "  space:\n    rl.lr: {type: float, low: 1.0e-5, high: 1.0e-3, log: true}\n")
    base = TINY_BASE.replace("eval: {k: 2, max_new_tokens: 16}", "eval: {k: 2, max_new_tokens: 16, every: 2}")
    sweep = write_sweep(tmp_path / "st.yaml", "st", CPU_JOBS + block, base=base)
    res = snakemake_slurm(tmp_path, sweep)
    assert res.returncode == 0, res.stderr[-4000:]
    spec = load_sweep(sweep).spec.optuna
    trials = optuna.load_study(study_name="st", storage=make_storage(spec, tmp_path / "results", "st")).trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED]
    assert trials[0].intermediate_values == {2: -1.0} and trials[1].intermediate_values == {2: -2.0}
    rows = runs_rows(tmp_path / "results")
    assert sorted(r["stage"] for r in rows) == ["eval", "eval", "eval", "rl", "rl", "sft"]  # one SFT job for both
    for r in rows:
        assert r["slurm_job_id"], r
    rl = {r["trial"]: r for r in rows if r["stage"] == "rl"}
    assert rl[0]["status"] == "completed" and (rl[1]["status"], rl[1]["trial_state"]) == ("pruned", "pruned")
    steps = run_cli("--results", str(tmp_path / "results"), "query",
                    f"select step from train_steps where run_id = '{rl[1]['run_id']}' order by step", "--format",
                    "json")
    assert [r["step"] for r in json.loads(steps.stdout)] == [1, 2]  # the pruned trial's second segment never ran


@pytest.mark.long(covers=[*SLURM_CODE, "workflow/design/", "rules/design.smk", "workflow/study/nested.py"])
def test_a_design_of_seeds_on_demand_runs_its_rounds_as_slurm_jobs(slurm, tmp_path):
    """Seeds on demand through the profile: the design's driver runs where snakemake runs, each round's nested
    snakemake gets the profile, so every round's stage jobs are SLURM jobs; the second round decides (the metric
    puts SFPO one unit above GRPO; 2 seeds a round cannot decide in round 1 at error 0.2)."""
    metric = ("SELECT run_id, CASE WHEN method = 'sfpo' THEN 1.0 ELSE 0.0 END + seed / 1000.0 AS value FROM runs "
              "WHERE stage = 'rl'")
    block = ("grid:\n  rl.update: [grpo, sfpo]\n"
             f"seeds: {{compare: rl.update, metric: {{sql: \"{metric}\"}}, per_round: 2, rounds: 3, error: 0.2}}\n")
    sweep = write_sweep(tmp_path / "sod.yaml", "sod", CPU_JOBS + block)
    res = snakemake_slurm(tmp_path, sweep)
    assert res.returncode == 0, res.stderr[-4000:]
    done = json.loads(next((tmp_path / "results" / "sod" / "design").glob("DONE_*.json")).read_text())
    assert done["decisions"] == {"rl.update=grpo | rl.update=sfpo": "smaller"} and done["rounds"] == 2
    rows = runs_rows(tmp_path / "results", "stage = 'rl'")
    assert sorted((r["method"], r["seed"]) for r in rows) == [(m, s) for m in ("grpo", "sfpo") for s in range(4)]
    for r in runs_rows(tmp_path / "results"):
        assert r["slurm_job_id"], r  # every round's stage jobs went through SLURM
    out = run_cli("--results", str(tmp_path / "results"), "query", "select round, verdict from decisions order by "
                  "round", "--format", "json")
    assert [(r["round"], r["verdict"]) for r in json.loads(out.stdout)] == [(1, "continue"), (2, "smaller")]


@pytest.mark.long(covers=SLURM_CODE)
def test_a_controller_outage_mid_sweep_is_waited_out_not_fatal(slurm, tmp_path):
    """slurmctld goes away for 40 s while jobs are queued and running (a restart, a failover): each SLURM command
    then takes ~9 s to fail, a poll's retries give up after ~30 s; the sweep backs off, carries on when the
    controller is back, and completes."""
    pidfile = Path(os.environ.get("RLSWEEP_SLURM_DIR", "/tmp/rlsweep-slurm")) / "run" / "slurmctld.pid"
    if not pidfile.is_file():
        pytest.skip("not the project's local cluster: the test does not stop someone else's controller")
    sweep = write_sweep(tmp_path / "out.yaml", "out", CPU_JOBS + "seeds: [0, 1]\n")
    proc = snakemake_slurm(tmp_path, sweep, background=True)
    # submitted: submitit's pickle is renamed to the job's id once sbatch answered (the store's sft directory is not
    # a sign, Snakemake makes it before sbatch runs, and an outage then is sbatch's retry, not a poll's back-off)
    _wait(lambda: any((tmp_path / ".snakemake" / "slurm").glob("*/*_submitted.pkl")), "the SFT job's submission", proc)
    os.kill(int(pidfile.read_text()), 15)
    time.sleep(40)
    subprocess.run(["slurmctld"], check=True)  # jobs and their state survive a controller restart (StateSaveLocation)
    out, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, out[-4000:]
    assert "SLURM status unknown" in out  # it noticed, and waited
    assert {r["status"] for r in runs_rows(tmp_path / "results")} == {"completed"}


DIRECT_SNAKEFILE = """
rule all:
    input: "shell.txt", "python.txt", "stale.txt"
rule shell_rule:
    output: "shell.txt"
    shell: "echo $SLURM_JOB_ID > {output}"
rule python_rule:
    output: "python.txt"
    run:
        import os
        open(output[0], "w").write(os.environ["SLURM_JOB_ID"])
rule failing_shell:
    output: "stale.txt"
    shell: "echo partial > {output}; false; echo never >> {output}"
"""


def test_a_shell_rule_runs_its_command_in_the_job_without_a_second_snakemake(slurm, tmp_path):
    """A plain shell rule's SLURM job runs the formatted command itself (under bash -euo pipefail, as Snakemake's
    shell() would); a run: rule still starts Snakemake inside its job; a failing command fails the job and leaves
    no partial output behind."""
    (tmp_path / "Snakefile").write_text(DIRECT_SNAKEFILE)
    res = subprocess.run([sys.executable, "-m", "snakemake", "--executor", "rlsweep-slurm", "--jobs", "3",
                          "--seconds-between-status-checks", "1", "--keep-going", "-d", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode != 0, res.stderr[-3000:]  # failing_shell
    logs = {}
    for rule in ("shell_rule", "python_rule", "failing_shell"):
        m = re.search(rf"\({re.escape(f'rlsweep-{rule}')}\) submitted as SLURM job (\S+); log: (\S+)", res.stderr)
        assert m, res.stderr[-3000:]
        logs[rule] = (m.group(1), Path(m.group(2)).read_text())
    # both payloads really ran in SLURM jobs, and each one in its own
    assert (tmp_path / "shell.txt").read_text().strip() == logs["shell_rule"][0]
    assert (tmp_path / "python.txt").read_text().strip() == logs["python_rule"][0]
    shell_log, python_log = logs["shell_rule"][1], logs["python_rule"][1]
    assert "rlsweep: running cd " in shell_log and "-m snakemake" not in shell_log
    assert "-m snakemake" in python_log
    # `false` mid-command fails the job (set -e), and Snakemake removes what it had written
    assert "failing_shell" in res.stderr and "failed" in res.stderr
    assert not (tmp_path / "stale.txt").exists()
    # a job that fails for good is reported with SLURM's state and its log, and the rest went on (--keep-going);
    # the same for a sweep's stage job, with its row in `runs`: the long test below
    failed_id = logs["failing_shell"][0]
    m = re.search(rf"SLURM job {re.escape(failed_id)} failed: state FAILED[^\n]*\. Log: (\S+)", res.stderr)
    assert m, res.stderr[-3000:]
    assert Path(m.group(1)).read_text() == logs["failing_shell"][1]


TIMED_OUT = """
rule all:
    input: "done.txt"
rule work:
    output: "done.txt"
    resources: rlsweep_retry="timeout=1,time_factor=2", runtime=1
    shell: "echo $SLURM_JOB_ID >> {output}.tries; if [ -z \\"${{RLSWEEP_SLURM_ATTEMPTS:-}}\\" ]; then sleep 300; fi; "
           "echo $SLURM_JOB_ID > {output}"
"""


@pytest.mark.long(covers=SLURM_CODE)
def test_a_job_that_times_out_without_requeues_left_is_retried_with_more_time(slurm, tmp_path):
    """TIMEOUT, for real: a 1-minute job whose payload ignores the checkpoint signal and has no requeue left
    (max-requeues 0) waits for SLURM, which ends it TIMEOUT; the executor resubmits the same Snakemake job with
    twice the time limit, and the attempt that knows it is a retry finishes."""
    (tmp_path / "Snakefile").write_text(TIMED_OUT)
    out = subprocess.run([sys.executable, "-m", "snakemake", "--executor", "rlsweep-slurm", "--jobs", "1",
                          "--rlsweep-slurm-max-requeues", "0", "--seconds-between-status-checks", "2",
                          "-d", str(tmp_path)], capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    first, second = (tmp_path / "done.txt.tries").read_text().split()
    assert re.search(rf"SLURM job {first} \(rlsweep-work\) ended TIMEOUT on \S+: retry 1 of 1 as SLURM job {second}, "
                     r"time limit 1 -> 2 min", out.stderr), out.stderr[-3000:]
    assert sacct_field(first, "State") == "TIMEOUT" and sacct_field(second, "Timelimit") == "00:02:00"
    assert (tmp_path / "done.txt").read_text().strip() == second
    log = next((tmp_path / ".snakemake" / "slurm").glob(f"{first}/{first}_0_log.out")).read_text()
    assert "rlsweep: no requeue left" in log


def test_a_results_root_run_locally_and_through_slurm_names_no_machine_path_and_works_copied(slurm, tmp_path):
    """Issue 80: a SLURM job's SLURM.json and LIVE.json named its log by an absolute path under the checkout's
    .snakemake/slurm/ (outside the results), and the results recorded other absolute paths: copied elsewhere, or
    mounted at another path, they pointed at nothing. Now the stage job's own log (which the job tees its stderr into)
    and a copy of submitit's log when the job ends lie in its stage directory, named relative to it. One sweep runs
    locally and one through the profile into one results directory; the whole of it, copied, holds neither the old
    working directory's path nor the checkout's, and `rlsweep watch` and `doctor` on the copy find each job's log."""
    from helpers import files_naming, snakemake
    work = tmp_path / "work"
    local = write_sweep(tmp_path / "local.yaml", "local", "seeds: [0]\n")
    remote = write_sweep(tmp_path / "remote.yaml", "remote", CPU_JOBS + "seeds: [1]\n")
    ran = snakemake(work, local)
    assert ran.returncode == 0, ran.stderr[-3000:]
    ran = snakemake_slurm(work, remote)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    run = load_sweep(remote).runs[0]
    rl_dir = stage_dir(work / "results", "rl", run.run_id)
    record = json.loads((rl_dir / "SLURM.json").read_text())
    # (submitit's stderr goes to its stdout file here: the copy of that one is the job's log)
    assert record["log"] in (f"slurm-{record['job_id']}.err", f"slurm-{record['job_id']}.out")
    assert "rl " in (rl_dir / record["log"]).read_text()
    assert json.loads((rl_dir / "LIVE.json").read_text())["log"] == "job.log" and (rl_dir / "job.log").stat().st_size

    copied = tmp_path / "elsewhere" / "results"
    shutil.copytree(work / "results", copied, symlinks=True)
    assert files_naming(copied, work, REPO, tmp_path / "local.yaml", skip=("wandb",)) == []
    shutil.rmtree(work)  # the old paths lead nowhere now
    snapshot = run_cli("--results", str(copied), "watch", str(remote), "--once", env={"COLUMNS": "250"})
    assert snapshot.returncode == 0 and "Traceback" not in snapshot.stderr, snapshot.stderr
    assert run_cli("--results", str(copied), "doctor", str(remote)).returncode == 0
    assert run_cli("--results", str(copied), "doctor", str(local)).returncode == 0
