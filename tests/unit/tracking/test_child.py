"""A job's trackers run in a child process at the lowest CPU priority (workflow/tracking/child.py): what the job
queues reaches them once each, a failing or hung tracker costs the job one warning and a bounded wait, and the job's
end (finished or not) reaches them."""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np
import pytest
from helpers import SUPPORT

from workflow.results.train_log import TrainLog
from workflow.tracking.child import TrackerProcess
from workflow.tracking.hook import job_hook, record_tracking
from workflow.tracking.runs import Point, TrackedRun

RUN = TrackedRun("rl", "0123456789ab", "base", 0)
MAKE = "file_tracker:make"  # tests/support/file_tracker.py, on the child's path (below)


@pytest.fixture(autouse=True)
def support_on_the_childs_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(SUPPORT), os.environ.get("PYTHONPATH")) if p))


def seen(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def child(tmp_path, warnings, **settings) -> TrackerProcess:
    return TrackerProcess({"fake": {"file": str(tmp_path / "sent.jsonl"), **settings}}, RUN, "s", tmp_path,
                          warn=warnings.append, make=MAKE)


def test_what_the_job_queues_reaches_the_trackers_in_a_child_at_the_lowest_priority_once_each(tmp_path):
    warnings = []
    hook = child(tmp_path, warnings)
    log = TrainLog(tmp_path, "s", "rl", RUN.stage_id)
    log.trackers = hook  # (what TrainLog opens at its first step for a job of a sweep with trackers)
    for step in (1, 2, 3):  # a numpy number, as an engine may record one, crosses too
        log.record(step=step, loss=np.float32(1.0 / step), note="text is no metric")
    hook.points([Point("eval/arithmetic/avg_at_4", 3, 0.5)])
    log.close(finished=True)
    got = seen(tmp_path / "sent.jsonl")
    assert got[0]["opened"] == RUN.key and got[-1]["closed"] is True and not hook.alive()
    assert {g["pid"] for g in got} == {hook.child.pid} != {os.getpid()}
    assert {g["nice"] for g in got} == {19}
    sent = [tuple(p) for g in got for p in g.get("points", [])]
    assert sorted((k, s) for k, s, _ in sent) == [("eval/arithmetic/avg_at_4", 3), ("train/loss", 2), ("train/loss", 3)]
    assert math.isclose(dict(((k, s), v) for k, s, v in sent)["train/loss", 3], 1 / 3, rel_tol=1e-6)
    assert not warnings


def test_a_tracker_that_cannot_open_or_log_is_one_warning_in_the_jobs_log_and_the_job_goes_on(tmp_path, capfd):
    for fail in ("open", "log"):
        hook = child(tmp_path, [], fail=fail)
        for step in range(1, 20):
            hook.rows([{"step": step, "loss": 0.5}])
        hook.close()
        err = capfd.readouterr().err  # the child's stderr is the job's (its log file in a stage job)
        assert err.count("warning: tracker fake off for base seed 0") == 1, err
        assert ("no route to host" if fail == "open" else "No space left") in err


def test_a_hung_tracker_gets_a_bounded_time_at_the_end_then_its_process_is_ended(tmp_path):
    warnings = []
    hook = child(tmp_path, warnings, hang=60)
    for step in range(2, 200):  # the tracker hangs in its first log call: queueing goes on regardless
        hook.rows([{"step": step, "loss": 0.5}])
    t0 = time.monotonic()
    hook.close(timeout_s=1.0)
    assert time.monotonic() - t0 < 10 and not hook.alive()
    assert len(warnings) == 1 and "not done after" in warnings[0] and "rlsweep track" in warnings[0]


def test_a_child_whose_job_dies_sends_nothing_more_and_lets_go_of_its_runs_unfinished(tmp_path):
    """A killed job's child must not send its queued steps after the job is gone: the resumed job sends them again
    (its trackers read what the run holds when they open), and both would log them (tests/e2e/test_tracking.py)."""
    hook = child(tmp_path, [])
    hook.rows([{"step": 2, "loss": 0.5}])
    deadline = time.monotonic() + 30
    while not hook.queue.empty() and time.monotonic() < deadline:  # (the header and the row go to the child)
        time.sleep(0.05)
    time.sleep(0.3)
    hook.child.stdin.close()  # what the child sees when the job dies: its stdin closes
    hook.child.wait(30)
    got = seen(tmp_path / "sent.jsonl")
    assert got[-1]["closed"] is False and not any("points" in g for g in got)


@pytest.mark.slow  # the real TensorBoard backend in the child imports torch (~2 s)
def test_a_stage_jobs_trackers_are_the_sweeps_in_a_child_process(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    record_tracking(tmp_path, "s", {"tensorboard": {}})
    hook = job_hook(tmp_path, "s", RUN)
    assert isinstance(hook, TrackerProcess)
    hook.rows([{"step": s, "loss": 1.0 / s} for s in (1, 2, 3)])
    hook.close(finished=True)
    acc = EventAccumulator(str(tmp_path / "s" / "tensorboard" / RUN.folder), size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("train/loss")] == [1, 2, 3]
