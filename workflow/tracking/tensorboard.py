"""TensorBoard: event files, one folder per training run (`tracking.tensorboard.dir`, default
results/<sweep>/tensorboard/), written with torch's SummaryWriter and read back with TensorBoard's own
EventAccumulator. A resumed or later process writes a new events file into the same folder; TensorBoard merges the
files of a folder into one run, and since only missing steps are written, each step appears once."""

from __future__ import annotations

import json
from pathlib import Path

from workflow.layout import sweep_dir
from workflow.tracking.base import Tracker
from workflow.tracking.runs import Point, TrackedRun


class TensorBoardTracker(Tracker):
    name = "tensorboard"

    def root(self) -> Path:
        return Path(self.settings.get("dir") or sweep_dir(self.results_root, self.sweep) / "tensorboard")

    def open(self, run: TrackedRun) -> None:
        self.run, self.writer = run, None
        self.folder = self.root() / run.folder
        self.held = self._read() if any(self.folder.glob("events.out.tfevents.*")) else set()

    def _read(self) -> set[tuple[str, int]]:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        acc = EventAccumulator(str(self.folder), size_guidance={"scalars": 0})  # 0: every point, not a sample
        acc.Reload()
        return {(tag, e.step) for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag)}

    def logged(self) -> set[tuple[str, int]]:
        return set(self.held)

    def log(self, points: list[Point]) -> None:
        if self.writer is None:  # (a folder is made only for a run with something to show)
            from torch.utils.tensorboard import SummaryWriter
            new = not self.folder.is_dir()
            # flushed after every call: a killed job keeps what it logged (the writer's own default waits 120 s)
            self.writer = SummaryWriter(str(self.folder), max_queue=10_000, flush_secs=30)
            if new:
                self.writer.add_text("config", "```\n" + json.dumps(self.run.config, indent=1, sort_keys=True)
                                     + "\n```")
        for p in points:
            self.writer.add_scalar(p.key, p.value, p.step)
        self.writer.flush()
        self.held.update((p.key, p.step) for p in points)

    def close(self, finished: bool = False) -> None:
        if self.writer is not None:
            self.writer.close()
