"""A job's trackers never fail it and never hold it up: the job thread only queues; a tracker that cannot open or
log is switched off with one warning; a hung one gets a bounded time at the end."""

from __future__ import annotations

import threading

from workflow.results.train_log import TrainLog
from workflow.tracking.base import Tracker
from workflow.tracking.hook import TrackerHook, record_tracking, tracking_settings
from workflow.tracking.runs import TrackedRun

RUN = TrackedRun("rl", "0123456789ab", "base", 0)


class Recording(Tracker):
    """Records what it is sent; `fail` names the call that raises, `gate` holds log() until it is set."""

    sent: list = []

    def __init__(self, settings, sweep, results_root, fail=None, gate=None):
        super().__init__(settings, sweep, results_root)
        self.fail, self.gate = fail, gate

    def open(self, run):
        if self.fail == "open":
            raise ConnectionError("no route to host")

    def logged(self):
        return {("train/loss", 1)}  # what a resumed job finds: step 1 is there

    def log(self, points):
        if self.gate is not None:
            self.gate.wait()
        if self.fail == "log":
            raise OSError(28, "No space left on device")
        Recording.sent += points


def hook(warnings, **kw):
    return TrackerHook({"fake": {}}, RUN, "s", "/nonexistent", warn=warnings.append,
                       make_tracker=lambda name, s, sweep, root: Recording(s, sweep, root, **kw))


def test_only_what_the_tracker_lacks_is_sent_from_another_thread(tmp_path):
    Recording.sent, warnings = [], []
    h = hook(warnings)
    log = TrainLog(tmp_path, "s", "rl", RUN.stage_id)
    log.trackers = h  # (what TrainLog opens at its first step for a job of a sweep with trackers)
    for step in (1, 2, 3):
        log.record(step=step, loss=1.0 / step)
    log.close(finished=True)
    assert [(p.key, p.step) for p in Recording.sent] == [("train/loss", 2), ("train/loss", 3)] and not warnings


def test_a_tracker_that_cannot_open_or_log_is_one_warning_and_the_job_goes_on(tmp_path):
    for fail in ("open", "log"):
        Recording.sent, warnings = [], []
        h = hook(warnings, fail=fail)
        log = TrainLog(tmp_path, "s", "rl", RUN.stage_id)
        log.trackers = h
        for step in range(1, 20):
            log.record(step=step, loss=0.5)
        log.flush()  # the rows still land
        log.close()
        assert len(warnings) == 1 and "tracker fake off for base seed 0" in warnings[0], warnings
        assert ("no route to host" if fail == "open" else "No space left") in warnings[0]


def test_a_hung_tracker_never_holds_the_job_and_gets_a_bounded_time_at_the_end(tmp_path):
    Recording.sent, warnings, gate = [], [], threading.Event()
    h = hook(warnings, gate=gate)
    log = TrainLog(tmp_path, "s", "rl", RUN.stage_id)
    log.trackers = h  # (what TrainLog opens at its first step for a job of a sweep with trackers)
    for step in range(2, 200):  # the tracker blocks on its first log call: recording goes on regardless
        log.record(step=step, loss=0.5)
    h.close(timeout_s=0.2)
    assert len(warnings) == 1 and "not done after" in warnings[0] and "rlsweep track" in warnings[0]
    gate.set()


def test_a_sweep_records_its_trackers_where_its_jobs_find_them(tmp_path):
    assert tracking_settings(tmp_path, "s") == {}
    record_tracking(tmp_path, "s", {"tensorboard": {"dir": None}, "mlflow": None, "wandb": None})
    assert tracking_settings(tmp_path, "s") == {"tensorboard": {"dir": None}}


def test_a_job_of_a_sweep_with_trackers_opens_them_at_its_first_step_and_one_without_never(tmp_path):
    record_tracking(tmp_path, "s", {"tensorboard": {}})
    log = TrainLog(tmp_path, "s", "rl", RUN.stage_id, tracked=RUN)
    assert log.trackers is None  # nothing opened before there is a step to send
    log.record(step=1, loss=0.5)
    assert log.trackers is not None
    log.close(finished=True)
    assert any((tmp_path / "s" / "tensorboard" / RUN.folder).glob("events.out.tfevents.*"))
    quiet = TrainLog(tmp_path, "other", "rl", RUN.stage_id, tracked=RUN)
    quiet.record(step=1, loss=0.5)
    assert quiet.trackers is None
