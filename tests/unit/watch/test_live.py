"""A training job's live file (workflow/live.py): what `rlsweep watch` shows between checkpoints."""

from __future__ import annotations

import json
import math

from workflow.layout import LIVE
from workflow.live import LiveFile, read_live
from workflow.results.train_log import TrainLog


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_first_step_then_at_most_every_few_seconds_then_the_last(tmp_path):
    clock = Clock()
    live = LiveFile(tmp_path, "rl", "abc", total=100, until=10, every_s=2.0, clock=clock)
    written = []
    for step in range(1, 11):
        clock.t += 0.5  # a step every half second: one write per four steps, plus the first and the last
        live.update(step, {"step": step, "reward": step / 10, "entropy": 1.0})
        found = read_live(tmp_path)
        if found is not None and (not written or found["step"] != written[-1]):
            written.append(found["step"])
    assert written == [1, 5, 9, 10]
    last = read_live(tmp_path)
    assert last["total"] == 100 and last["until"] == 10 and last["first_step"] == 1
    assert math.isclose(last["s_per_step"], 0.5)  # (10 - 1) steps in 4.5 s since the first
    assert last["metrics"] == {"reward": 1.0, "entropy": 1.0}


def test_a_resumed_job_counts_its_rate_from_its_own_first_step(tmp_path):
    clock = Clock()
    first = LiveFile(tmp_path, "rl", "abc", total=10, every_s=0.0, clock=clock)
    for step in (1, 2):
        clock.t += 1.0
        first.update(step, {"reward": 0.1})
    clock.t += 60.0  # killed, requeued, loaded again: none of that is a step
    again = LiveFile(tmp_path, "rl", "abc", total=10, every_s=0.0, clock=clock)
    for step in (3, 4, 5):
        clock.t += 2.0
        again.update(step, {"reward": 0.2})
    found = read_live(tmp_path)
    assert found["step"] == 5 and found["first_step"] == 3 and math.isclose(found["s_per_step"], 2.0)


def test_only_finite_numbers_land_and_a_torn_file_reads_as_none(tmp_path):
    live = LiveFile(tmp_path, "sft", "abc", total=3, every_s=0.0)
    live.update(1, {"loss": float("nan"), "lr": 1e-4, "gate_tripped": True, "note": "text", "x": float("inf")})
    assert read_live(tmp_path)["metrics"] == {"lr": 1e-4, "gate_tripped": 1}
    (tmp_path / LIVE).write_text('{"step": 3, "metr')  # a foreign or torn file is absent, never an error
    assert read_live(tmp_path) is None
    (tmp_path / LIVE).write_text(json.dumps(["not", "a", "live", "file"]))
    assert read_live(tmp_path) is None


def test_a_live_file_that_cannot_be_written_never_stops_training(tmp_path):
    gone = tmp_path / "file-not-dir"
    gone.write_text("")
    live = LiveFile(gone, "rl", "abc", total=5, every_s=0.0)  # its directory is a file: every write fails
    live.update(1, {"reward": 0.5})  # no exception
    assert read_live(gone) is None


def test_the_train_log_keeps_the_stage_live_file_and_writes_rows_only_at_flush(tmp_path):
    log = TrainLog(tmp_path, "demo", "rl", "0123456789ab", total=4, until=2)
    log.record(step=1, loss=0.5, reward=0.25, entropy=1.5)
    found = read_live(tmp_path / "_store" / "rl" / "0123456789ab")
    assert found["step"] == 1 and found["metrics"]["reward"] == 0.25 and found["until"] == 2
    assert not (tmp_path / "_store" / "tables").exists()  # the Parquet rows land at the checkpoint, as before
    log.record(step=2, loss=0.4, reward=0.5, entropy=1.4)
    assert read_live(tmp_path / "_store" / "rl" / "0123456789ab")["step"] == 2  # a segment's last step: written
    log.flush()
    assert len(list((tmp_path / "_store" / "tables" / "train_steps").glob("*.parquet"))) == 1
