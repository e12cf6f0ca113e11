"""The per-step log every training stage (either engine, SFT or RL) writes into `train_steps`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workflow.layout import parse_table_file, stage_dir, train_steps_file, train_steps_files
from workflow.live import LiveFile
from workflow.results.writer import write_rows
from workflow.tracking.hook import job_hook


class TrainLog:
    """Buffers per-step rows and writes them as one Parquet file per checkpoint interval.

    Engines call `flush()` right BEFORE saving a checkpoint: if the process dies between the two, the restarted
    stage recomputes the same steps and rewrites the same file name with the same rows, so `train_steps` holds
    every step exactly once either way.

    Given the stage's `total` steps (and a segment's last, `until`), every recorded step also updates the stage's
    live file (workflow/live.py): what `rlsweep watch` shows between checkpoints; given `trackers`, it goes to the
    sweep's experiment trackers as well (queued: workflow/tracking/hook.py).
    """

    def __init__(self, results_root: str | Path, sweep: str, stage: str, run_id: str, total: int | None = None,
                 until: int | None = None, tracked: Any = None):
        self.results_root, self.sweep, self.stage, self.run_id = results_root, sweep, stage, run_id
        self.pending: list[dict[str, Any]] = []
        self.live = (LiveFile(stage_dir(results_root, stage, run_id), stage, run_id, total, until)
                     if total else None)
        # the job's tracker run (tracking/runs.py TrackedRun) and the sweep's trackers for it (tracking/hook.py),
        # opened at the first recorded step: a stage job whose engine records its steps in another process (verl's
        # trainer, which gets `tracked` and opens its own) opens none
        self.tracked, self.trackers, self._unopened = tracked, None, tracked is not None

    def record(self, **row: Any) -> None:
        self.pending.append({"run_id": self.run_id, "sweep": self.sweep, "stage": self.stage, **row})
        if self.live is not None:
            self.live.update(row["step"], row)
        if self._unopened:
            self.trackers, self._unopened = job_hook(self.results_root, self.sweep, self.tracked), False
        if self.trackers is not None:
            self.trackers.rows([row])

    def close(self, finished: bool = False) -> None:
        """The job is over (`finished`: its stage is done): the trackers get a bounded time to send what is queued."""
        if self.trackers is not None:
            self.trackers.close(finished)

    def discard_after(self, step: int) -> None:
        """On resume from the checkpoint at `step`: delete this run's files that start after it. An earlier
        attempt may have flushed steps and died before saving the checkpoint that follows them; the resumed run
        recomputes those steps and may flush them under another range (a preemption checkpoints off the
        interval), so without this they would appear twice. Its small files by name are all there is: a stage that
        is still training is never packed (compaction takes only stages with DONE.json and no RUNNING.lock; a
        segmented run between segments has DONE_<end>.json only), tests/unit/results/test_compaction.py."""
        for f in train_steps_files(self.results_root, self.stage, self.run_id):
            name = parse_table_file("train_steps", f.stem)
            if name is not None and name.first > step:
                f.unlink()

    def flush(self) -> None:
        if not self.pending:
            return
        first, last = self.pending[0]["step"], self.pending[-1]["step"]
        write_rows(self.results_root, "train_steps", train_steps_file(self.stage, self.run_id, first, last),
                   self.pending)
        self.pending = []
