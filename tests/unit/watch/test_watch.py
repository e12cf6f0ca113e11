"""`rlsweep watch` over a store as a running sweep leaves it (workflow/watch/): each run's state, stage, step, rate
and metrics, its latest evaluation, SLURM's view of its jobs from one squeue call, the reason a job failed and its
log, the header's counts, folding and sorting; and that watching writes nothing."""

from __future__ import annotations

import json
import os
import stat
import textwrap
from pathlib import Path

import pytest

from helpers import REPO, write_sweep
from workflow.atomic import write_json
from workflow.cli import main
from workflow.layout import SLURM_RECORD, done_path, runs_file, stage_dir
from workflow.live import LiveFile
from workflow.results.writer import write_rows
from workflow.runlock import LOCK_NAME
from workflow.slurm.cluster import JobState
from workflow.sweep.expand import load_sweep
from workflow.watch.snapshot import Watcher
from workflow.watch.view import plain

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB"


def _row(root: Path, stage: str, stage_id: str, status: str, error: str | None = None, **job) -> None:
    write_rows(root, "runs", runs_file(stage, stage_id, job.get("eval_step"), job.get("eval_group")),
               [{"run_id": stage_id, "sweep": "w", "stage": stage, "status": status, "error": error, **job}])


@pytest.fixture
def store(tmp_path):
    """Five runs of one sweep, one in each state: rl running here (heartbeat, live file), queued on SLURM, running
    on SLURM, failed on SLURM (CUDA out of memory, its log), and one finished and evaluated."""
    sweep = load_sweep(write_sweep(tmp_path / "w.yaml", "w", """
        grid: {rl.update: [grpo, sfpo]}
        seeds: [0, 1, 2]
        """))
    root = tmp_path / "results"
    runs = {(r.config.rl.update, r.config.seed): r for r in sweep.runs}
    sft = runs["grpo", 0].sft_id
    write_json(done_path(root, "sft", sft), {"stage": "sft", "id": sft})
    # grpo seed 0: training here, step 3 of 4, its lock renewed just now
    here = runs["grpo", 0]
    rl_dir = stage_dir(root, "rl", here.run_id)
    rl_dir.mkdir(parents=True)
    (rl_dir / LOCK_NAME).write_text(json.dumps({"host": "node-a", "pid": os.getpid()}))
    _row(root, "rl", here.run_id, "running")
    live = LiveFile(rl_dir, "rl", here.run_id, total=4, every_s=0.0)
    for step in (1, 2, 3):
        live.update(step, {"reward": 0.25 * step, "entropy": 1.0, "loss": 0.1})
    # grpo seed 1: queued on SLURM; sfpo seed 0: running there; sfpo seed 1: failed there for good
    for key, job in ((("grpo", 1), "101"), (("sfpo", 0), "102_3"), (("sfpo", 1), "103")):
        write_json(stage_dir(root, "rl", runs[key].run_id) / SLURM_RECORD,
                   {"rule": "rl", "job_id": job, "log": str(tmp_path / f"{job}.log")})
    failed = runs["sfpo", 1].run_id
    (tmp_path / "103.log").write_text(f"step 1\nTraceback (most recent call last):\n  ...\n{OOM}\n")
    _row(root, "rl", failed, "failed", "RuntimeError: the job ended")
    # grpo seed 2: finished, evaluated at steps 2 and 4 (the last on two benchmark groups)
    done = runs["grpo", 2]
    finished = LiveFile(stage_dir(root, "rl", done.run_id), "rl", done.run_id, total=4, every_s=0.0)
    for step in (1, 2, 3, 4):
        finished.update(step, {"reward": 0.9, "entropy": 0.4})
    write_json(done_path(root, "rl", done.run_id), {"stage": "rl", "id": done.run_id})
    for step, group in done.eval_jobs:
        write_json(done_path(root, "eval", done.eval_id, done.run_id, step, group),
                   {"stage": "eval", "step": step, "scores": {"arithmetic": 0.5 if step < 4 else 0.75}})
    return sweep, root, runs


def squeue():
    return {"101": JobState("PENDING", reason="Priority"), "102_3": JobState("RUNNING", node="gpu7")}


def test_each_run_shows_its_state_step_rate_metrics_and_evaluation(store):
    sweep, root, runs = store
    calls = []
    snap = Watcher(sweep, root, squeue=lambda: calls.append(1) or squeue()).snapshot()
    assert len(calls) == 1  # one squeue call for the three SLURM jobs
    by = {(ln.method, ln.seed): ln for ln in snap.lines}
    here = by["grpo", 0]
    assert (here.state, here.stage, here.detail, here.step, here.total) == ("running", "rl", "node-a", 3, 4)
    assert here.metrics == {"reward": 0.75, "entropy": 1.0} and here.s_per_step is not None
    assert (by["grpo", 1].state, by["grpo", 1].detail) == ("queued", "job 101: Priority")
    assert (by["sfpo", 0].state, by["sfpo", 0].detail) == ("running", "gpu7")
    oom = by["sfpo", 1]
    assert (oom.state, oom.detail) == ("failed", "CUDA out of memory") and oom.log.endswith("103.log")
    done = by["grpo", 2]
    assert (done.state, done.eval, done.eval_step, done.metrics["reward"]) == ("done", 0.75, 4, 0.9)
    assert by["sfpo", 2].state == "pending"
    assert "alpha" not in here.metrics  # SFPO's headline number: a column only where an SFPO run logged it
    assert snap.jobs["failed"] == 1 and snap.jobs["running"] == 2 and snap.jobs["queued"] == 1
    every_job = 1 + len(sweep.runs) + sum(len(r.eval_jobs) for r in sweep.runs)  # one SFT job, RL runs, evaluations
    assert sum(snap.jobs.values()) == every_job and snap.jobs["pending"] == every_job - 1 - 2 - 1 - snap.jobs["done"]
    assert [p.reason for p in snap.problems] == ["CUDA out of memory"]


def test_a_job_killed_without_a_word_shows_failed_once_its_heartbeat_stops(store):
    sweep, root, runs = store
    lock = stage_dir(root, "rl", runs["grpo", 0].run_id) / LOCK_NAME
    os.utime(lock, (1, 1))  # the owner stopped renewing its lock long ago: kill -9
    line = next(ln for ln in Watcher(sweep, root, squeue=squeue).snapshot().lines if ln.run_id ==
                runs["grpo", 0].run_id)
    assert line.state == "failed" and "heartbeat" in line.detail


def test_squeue_failing_is_a_note_not_an_error(store):
    from workflow.slurm.cluster import SlurmError
    sweep, root, _ = store

    def down():
        raise SlurmError(["squeue"], "slurm_load_jobs error: Unable to contact slurm controller", transient=True)
    snap = Watcher(sweep, root, squeue=down).snapshot()
    assert any("squeue did not answer" in n for n in snap.notes)
    assert sum(ln.state == "failed" for ln in snap.lines) == 1  # the failed job is still known from its runs row


def test_folding_seeds_into_settings_and_sorting(store):
    sweep, root, _ = store
    snap = Watcher(sweep, root, squeue=squeue).snapshot()
    folded = plain(snap, max_lines=2).splitlines()
    rows = [ln for ln in folded[2:] if ln.startswith("rl.update")]
    assert len(rows) == 2 and all(" x3 " in r for r in rows)
    assert "failed" in next(r for r in rows if "sfpo" in r)  # a setting shows its seeds' most urgent state
    by_reward = [ln.split()[0] for ln in plain(snap, sort="reward").splitlines()[2:7]]
    assert by_reward[:2] == ["rl.update=grpo"] * 2  # 0.75 then 0.9 first; runs without a reward last
    with pytest.raises(ValueError, match="--sort 'nope'"):
        plain(snap, sort="nope")


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_the_command_prints_one_snapshot_exits_1_on_a_failure_and_writes_nothing(store, tmp_path, capsys,
                                                                                 monkeypatch):
    sweep, root, runs = store
    bin_dir, calls = tmp_path / "bin", tmp_path / "squeue-calls"
    bin_dir.mkdir()
    fake = bin_dir / "squeue"  # SLURM's squeue as the executor's parser reads it: id|state|node|reason
    fake.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        echo "$@" >> {calls}
        echo "101|PENDING||Priority"
        echo "102_3|RUNNING|gpu7|None"
        """))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    before = _tree(tmp_path)
    svg = tmp_path / "view.svg"
    rc = main(["watch", str(sweep.path), "--results", str(root), "--once", "--svg", str(svg)])
    out = capsys.readouterr().out
    assert rc == 1
    assert out.splitlines()[0].startswith("w: 6 runs | jobs ")
    assert "job 101: Priority" in out and "gpu7" in out and "3/4" in out
    assert f"failed: rl.update=sfpo seed 1, rl: CUDA out of memory (log: {tmp_path / '103.log'})" in out
    assert len(calls.read_text().splitlines()) == 1
    after = _tree(tmp_path)
    assert {k: v for k, v in after.items() if k not in (str(svg), str(calls))} == before  # nothing else written
    assert svg.read_text().startswith("<svg")


def test_a_sweep_without_slurm_jobs_never_calls_squeue(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path / "w.yaml", "w"))
    snap = Watcher(sweep, tmp_path / "results", squeue=lambda: pytest.fail("squeue called")).snapshot()
    assert [ln.state for ln in snap.lines] == ["pending"] and not snap.failed


def test_status_shows_a_running_stage_at_its_live_step_between_checkpoints(store, capsys, monkeypatch):
    sweep, root, runs = store
    monkeypatch.setenv("COLUMNS", "200")  # (rich's table, unsqueezed)
    assert main(["status", str(sweep.path), "--results", str(root)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if runs["grpo", 0].run_id in ln)
    assert "running step 3/4" in line  # no checkpoint yet: the live file's step


@pytest.mark.slow  # the CLI on a pseudo-terminal
def test_on_a_terminal_it_redraws_until_ctrl_c_and_leaves_cleanly(store, tmp_path):
    """The live view needs a terminal: the command runs on a pseudo-terminal, redraws a few times, and Ctrl-C ends it
    with exit 0 and no traceback."""
    import pty
    import signal
    import subprocess
    import sys
    import time
    sweep, root, _ = store
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "workflow.cli", "watch", str(sweep.path), "--results", str(root),
                             "--every", "0.2"], cwd=REPO, stdin=follower, stdout=follower, stderr=follower,
                            env={**os.environ, "COLUMNS": "200", "LINES": "40", "PATH": "/nonexistent"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # (a shell's bg jobs ignore it)
    os.close(follower)
    seen, deadline = b"", time.monotonic() + 60
    while seen.count(b"w: 6 runs") < 3 and time.monotonic() < deadline:  # three refreshes drawn
        seen += os.read(leader, 65536)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
    try:
        while chunk := os.read(leader, 65536):
            seen += chunk
    except OSError:  # the terminal closed with the process
        pass
    os.close(leader)
    assert seen.count(b"w: 6 runs") >= 3 and b"Traceback" not in seen
    assert b"squeue did not answer" in seen  # (no squeue on PATH: a note, not an error)


def test_the_header_sets_the_gpu_hours_used_against_the_plan_when_the_sweep_first_ran(store):
    from workflow.sweep.executor import record_executor
    from workflow.sweep.plan import record_plan
    from workflow.watch.view import header
    sweep, root, _ = store
    record_executor(root, "w", "rlsweep-slurm", None, 100)  # (the Snakefile's onstart: on a cluster)
    assert "planned" not in header(Watcher(sweep, root, squeue=squeue).snapshot())  # no plan recorded
    record_plan(sweep, root)  # (the Snakefile's, when the sweep first runs)
    snap = Watcher(sweep, root, squeue=squeue).snapshot()
    assert snap.planned_gpu_hours is not None and snap.planned_gpu_hours > 0
    # all of it from time limits (nothing measured): an upper bound, said
    assert f"GPU-hours {snap.gpu_hours:.1f} of at most {snap.planned_gpu_hours:.1f} planned" in header(snap)


def test_a_killed_local_job_is_failed_at_the_next_refresh_and_in_status_with_no_heartbeat_wait(store, capsys):
    """Issue 82, item 4: one liveness rule (runlock.owner_alive). A lock on this host whose process is gone is dead
    at once, however fresh its heartbeat: watch says failed (with its log), status says killed; a live owner here
    (this test's own process) is running."""
    import socket
    import subprocess
    import sys

    from workflow.runlock import process_start  # (the start time a lock records, as run_lock writes it)
    sweep, root, runs = store
    run = runs["grpo", 0]
    lock = stage_dir(root, "rl", run.run_id) / LOCK_NAME
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started = process_start(child.pid)
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": child.pid, "pid_start": started}))
    line = lambda: next(ln for ln in Watcher(sweep, root, squeue=squeue).snapshot().lines  # noqa: E731
                        if ln.run_id == run.run_id)
    assert line().state == "running"
    child.kill()
    child.wait()
    os.utime(lock)  # its heartbeat is fresh: only the pid says it is gone
    dead = line()
    assert (dead.state, dead.detail) == ("failed", "killed (its process is gone)")
    assert main(["--results", str(root), "status", sweep.path]) == 0
    assert "killed" in capsys.readouterr().out


@pytest.mark.parametrize("job", [("rl", "ab" * 6, None, None, None), ("sft", "cd" * 6, None, None, None),
                                 ("eval", "ef" * 6, "ab" * 6, 40, "math")])
def test_watch_names_each_job_s_files_where_the_jobs_write_them(tmp_path, job):
    # watch names its ~20,000 job paths as strings (issue 83): they are the layout's own paths, nothing else
    from workflow.layout import stage_dir_text
    from workflow.results.rows import runs_dir_text, runs_row_file, runs_row_text
    stage, stage_id, run_id, step, group = job
    root = tmp_path / "results"
    assert stage_dir_text(str(root), *job) == str(stage_dir(root, *job))
    assert runs_row_text(runs_dir_text(root), stage, stage_id, step, group) == str(
        runs_row_file(root, stage, stage_id, step, group))


def test_a_live_file_is_reread_when_it_changes_and_a_fifo_in_its_place_blocks_nothing(store):
    """The files a refresh reads are read once and then stat'ed: a live file rewritten between refreshes shows its
    new step at the next one; a FIFO where a job's LIVE.json goes (a stray `mkfifo`) is not opened for a read that
    would wait for a writer, and the job shows as if it had no live file."""
    sweep, root, runs = store
    here = runs["grpo", 0]
    watcher = Watcher(sweep, root, squeue=squeue)
    line = next(ln for ln in watcher.snapshot().lines if ln.run_id == here.run_id)
    assert (line.step, line.metrics["reward"]) == (3, 0.75)
    live = LiveFile(stage_dir(root, "rl", here.run_id), "rl", here.run_id, total=4, every_s=0.0)
    live.update(3, {"reward": 0.1})
    live.update(4, {"reward": 0.5})
    line = next(ln for ln in watcher.snapshot().lines if ln.run_id == here.run_id)
    assert (line.step, line.metrics["reward"]) == (4, 0.5)
    fifo = stage_dir(root, "rl", here.run_id) / "LIVE.json"
    fifo.unlink()
    os.mkfifo(fifo)
    line = next(ln for ln in Watcher(sweep, root, squeue=squeue).snapshot().lines if ln.run_id == here.run_id)
    assert line.state == "running" and line.step is None
