"""The sweep's ETA (workflow/watch/eta.py, timing.py): the schedule replayed over the executor's parallelism in the
DAG's order, each job timed by its live rate, its shape's measurements or (on SLURM) its time limit, and the words
that say which; and where the sweep runs (workflow/sweep/executor.py), recorded when it starts."""

from __future__ import annotations

import json
import os

import pytest

from helpers import write_sweep
from workflow.atomic import write_json
from workflow.layout import done_path, runs_file, stage_dir
from workflow.live import LiveFile
from workflow.results.writer import write_rows
from workflow.runlock import LOCK_NAME
from workflow.sweep.executor import EXECUTOR_FILE, Executor, executor_of, gpus_used, record_executor
from workflow.sweep.expand import load_sweep
from workflow.watch.eta import Eta, Task, estimate, makespan
from workflow.watch.snapshot import Watcher
from workflow.watch.view import header

pytestmark = pytest.mark.fast


def test_jobs_side_by_side_as_the_slots_allow_and_after_what_they_wait_for():
    four = [Task(10.0, "measured", (), 1) for _ in range(4)]
    assert makespan(four, 2) == 20.0 and makespan(four, 4) == 10.0 and makespan(four, 1) == 40.0
    chain = [Task(10.0, "measured", (), 1), Task(5.0, "measured", (0,), 1), Task(1.0, "measured", (1,), 1)]
    assert makespan(chain, 8) == 16.0  # a chain does not run faster on more slots
    # a job of 2 threads on 2 cores takes both: the others wait for it
    assert makespan([Task(10.0, "measured", (), 2), Task(3.0, "measured", (), 1), Task(3.0, "measured", (), 1)], 2) == 13
    # running jobs hold their slots from now: the pending one starts when the first ends
    running = [Task(4.0, "live", (), 1, running=True), Task(9.0, "live", (), 1, running=True),
               Task(10.0, "measured", (), 1)]
    assert makespan(running, 2) == 14.0
    assert makespan([Task(0.0, "measured", (), 0)] * 3, 1) == 0.0  # copies take no slot


def test_the_words_say_measured_at_most_or_no_basis():
    now = 1_000_000.0
    assert estimate([Task(90.0, "live", (), 1)], 2).text(now).startswith("ETA 1m30s (at ")
    bounded = estimate([Task(3600.0, "limit", (), 1), Task(60.0, "measured", (), 1)], 2)
    assert bounded.text(now).startswith("ETA at most 1h00m (by ") and "1 of 2 jobs from time limits" in bounded.text(now)
    partial = estimate([Task(60.0, "live", (), 1), Task(None, "none", (0,), 1)], 2)
    assert partial.text(now) == "ETA more than 1m00s: no basis for 1 of 2 jobs (nothing of their shape measured)"
    assert Eta(0.0, 3, 0, 3).text(now) == "ETA: no basis yet (3 jobs, none of a shape measured)"
    assert "parallelism a guess" in Eta(5.0, 1, 0, 0, guessed=True).text(now)


def test_where_the_sweep_runs_is_recorded_at_its_start_and_decides_the_gpus_a_job_uses(tmp_path, monkeypatch):
    monkeypatch.delenv("RLSWEEP_NESTED", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # this machine: no GPU for its jobs
    assert executor_of(tmp_path, "s", on="local") == Executor("local", os.cpu_count() or 1, 0, None)
    here = record_executor(tmp_path, "s", "local", 3, None)
    assert (here.kind, here.slots, here.gpus) == ("local", 3, 0) and executor_of(tmp_path, "s") == here
    assert gpus_used(4, here) == 0  # the sweep's resources ask SLURM for 4: here, on the CPU, none
    on_slurm = record_executor(tmp_path, "s", "rlsweep-slurm", 2, 50)
    assert (on_slurm.kind, on_slurm.slots) == ("slurm", 50) and gpus_used(4, executor_of(tmp_path, "s")) == 4
    assert json.loads((tmp_path / "s" / EXECUTOR_FILE).read_text())["kind"] == "slurm"
    monkeypatch.setenv("RLSWEEP_NESTED", "1")  # a study's trial run: the outer start's record stands
    assert record_executor(tmp_path, "s", "local", 1, None) is None and executor_of(tmp_path, "s") == on_slurm
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert gpus_used(4, Executor("local", 8, 2, "NVIDIA H200")) == 2


NO_GPU_HERE = not (os.path.isdir("/proc/driver/nvidia/gpus") or os.path.exists("/dev/nvidia0")
                   or os.path.exists("/dev/dxg"))


@pytest.mark.skipif(not NO_GPU_HERE, reason="a machine with a GPU device: the variable names real GPUs")
def test_a_cpu_machine_has_no_gpus_whatever_cuda_visible_devices_says(tmp_path, monkeypatch):
    # a CI image or a job environment may set CUDA_VISIBLE_DEVICES on a machine without GPUs: the sweep still runs
    # on the CPU, its runs rows say 0 GPUs, and its plan counts hours, not GPU-hours of GPUs that are not there
    from workflow.devices import device_used, visible_gpus
    monkeypatch.delenv("RLSWEEP_NESTED", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert visible_gpus() == (0, None) and device_used("rl") == {"gpus": 0, "gpu_kind": None}
    here = record_executor(tmp_path, "s", "local", 2, None)
    assert here.gpus == 0 and gpus_used(1, here) == 0


BASE = """
base:
  model: {n_layers: 1, hidden: 32, n_heads: 2}
  task: {n_heldout: 16}
  sft: {steps: 20, batch_size: 32, checkpoint_every: 10}
  rl: {steps: 10, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, checkpoint_every: 10}
  eval: {k: 2, max_new_tokens: 16, at_start: false}
"""
SWEEP = """
grid: {rl.update: [grpo]}
seeds: [0, 1, 2, 3]
resources:
  sft: {threads: 1%s}
  rl: {threads: 1%s}
  eval: {threads: 1%s}
"""


def _running(root, run, step, s_per_step, pid):
    """An RL job training here: its lock (this test's process), its row, its live file at `step`."""
    d = stage_dir(root, "rl", run.run_id)
    d.mkdir(parents=True, exist_ok=True)
    (d / LOCK_NAME).write_text(json.dumps({"host": "elsewhere", "pid": pid}))
    write_rows(root, "runs", runs_file("rl", run.run_id), [{"run_id": run.run_id, "sweep": "e", "stage": "rl",
                                                            "status": "running"}])
    clock = iter([0.0, 0.0, s_per_step * (step - 1)])
    live = LiveFile(d, "rl", run.run_id, total=10, every_s=0.0, clock=lambda: next(clock))
    live.update(1, {"reward": 0.5})
    live.update(step, {"reward": 0.5})


def test_a_running_sweep_s_eta_from_live_rates_measured_evaluations_and_the_recorded_parallelism(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path / "e.yaml", "e", SWEEP % ("", "", ""), base=BASE))
    assert [(r.segment_ends, r.eval_jobs) for r in sweep.runs[:1]] == [([10], [(10, "arithmetic")])]
    root = tmp_path / "results"
    record_executor(root, "e", "local", 2, None)  # 2 cores, each RL and eval job takes 1
    runs = sweep.runs
    write_json(done_path(root, "sft", runs[0].sft_id), {"stage": "sft"})
    for run in runs[:2]:  # two train at 2 s a step, at step 6 of 10: 8 s left each
        _running(root, run, 6, 2.0, os.getpid())
    w = Watcher(sweep, root, squeue=dict)
    eta = w.snapshot().eta
    # the two pending runs have the running ones' shape: 10 steps x 2 s; their evaluations have no measurement
    # (and here nothing enforces a time limit): left out, and said
    assert (eta.jobs, eta.unbased, eta.bounded) == (8, 4, 0)
    assert eta.seconds == pytest.approx(8 + 20, abs=0.5)
    # one evaluation of the same settings finished elsewhere in the store, in 3 s: every job now has a basis
    step, group = runs[0].eval_jobs[-1]
    cfg = runs[0].stage_config("eval")
    write_rows(root, "runs", runs_file("eval", "0" * 12, step, group), [
        {"run_id": "0" * 12, "sweep": "other", "stage": "eval", "status": "completed", "wall_s": 3.0,
         "config": json.dumps(cfg), "eval_step": step, "eval_group": group}])
    snap = Watcher(sweep, root, squeue=dict).snapshot()
    # 0-8 s: the running two; 8-28: the pending two (before evaluations: the DAG's order); 28-31, 31-34: the four
    # evaluations two at a time
    assert (snap.eta.jobs, snap.eta.unbased) == (8, 0) and snap.eta.seconds == pytest.approx(34, abs=0.5)
    assert "| ETA 34s (at " in header(snap) and "| hours " in header(snap) and "GPU-hours" not in header(snap)
    record_executor(root, "e", "local", 4, None)  # four cores: all four RL jobs at once
    assert Watcher(sweep, root, squeue=dict).snapshot().eta.seconds == pytest.approx(20 + 3, abs=0.5)


def test_on_slurm_a_job_nothing_measured_is_timed_at_its_time_limit_and_said_at_most(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path / "e.yaml", "e", SWEEP % (', time: "01:00:00"', ', time: "02:00:00"',
                                                                     ', time: "00:30:00"'), base=BASE))
    root = tmp_path / "results"
    record_executor(root, "e", "rlsweep-slurm", None, 100)
    eta = Watcher(sweep, root, squeue=dict).snapshot().eta
    # nothing has run: SFT (1 h), then the four RL runs side by side (2 h), then their evaluations (30 min)
    assert (eta.jobs, eta.bounded, eta.unbased) == (9, 9, 0) and eta.seconds == pytest.approx(3.5 * 3600)
    assert eta.text(0.0).startswith("ETA at most 3h30m")


def test_between_replays_the_eta_counts_down_and_a_job_that_ends_replays_it_at_once(tmp_path):
    # watch refreshes every 5 s; the schedule is replayed at most every ETA_EVERY_S while no job changes state (at
    # 10,000 runs a replay is a third of a refresh): in between, the last figure counts down with the clock
    from workflow.watch.timing import ETA_EVERY_S
    sweep = load_sweep(write_sweep(tmp_path / "e.yaml", "e", SWEEP % ("", "", ""), base=BASE))
    root = tmp_path / "results"
    record_executor(root, "e", "local", 4, None)
    write_json(done_path(root, "sft", sweep.runs[0].sft_id), {"stage": "sft"})
    for run in sweep.runs:
        _running(root, run, 6, 2.0, os.getpid())
    now = [1000.0]
    w = Watcher(sweep, root, squeue=dict, clock=lambda: now[0])
    first = w.snapshot().eta
    assert first.seconds == pytest.approx(8, abs=0.5) and first.unbased == 4  # (4 evaluations: no basis)
    now[0] += ETA_EVERY_S / 3
    assert w.snapshot().eta.seconds == pytest.approx(first.seconds - ETA_EVERY_S / 3)
    write_json(stage_dir(root, "rl", sweep.runs[0].run_id) / "DONE.json", {"stage": "rl"})  # a job ends: replayed
    (stage_dir(root, "rl", sweep.runs[0].run_id) / LOCK_NAME).unlink()
    now[0] += 1.0
    replayed = w.snapshot().eta
    assert replayed.jobs == first.jobs - 1
