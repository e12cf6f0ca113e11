"""The Engine interface and the per-step log every engine writes into `train_steps`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from workflow.results.writer import table_dir, write_rows


@dataclass(frozen=True)
class Sample:
    text: str
    n_tokens: int
    truncated: bool  # hit max_new_tokens without an end-of-sequence token


class TrainLog:
    """Buffers per-step rows and writes them as one Parquet file per checkpoint interval.

    Engines call `flush()` right BEFORE saving a checkpoint: if the process dies between the two, the restarted
    stage recomputes the same steps and rewrites the same file name with the same rows, so `train_steps` holds
    every step exactly once either way.
    """

    def __init__(self, results_root: str | Path, sweep: str, stage: str, run_id: str):
        self.results_root, self.sweep, self.stage, self.run_id = results_root, sweep, stage, run_id
        self.pending: list[dict[str, Any]] = []

    def record(self, **row: Any) -> None:
        self.pending.append({"run_id": self.run_id, "sweep": self.sweep, "stage": self.stage, **row})

    def discard_after(self, step: int) -> None:
        """On resume from the checkpoint at `step`: delete this run's files that start after it. An earlier
        attempt may have flushed steps and died before saving the checkpoint that follows them; the resumed run
        recomputes those steps and may flush them under another range (a preemption checkpoints off the
        interval), so without this they would appear twice."""
        for f in table_dir(self.results_root, self.sweep, "train_steps").glob(f"{self.stage}_{self.run_id}_*.parquet"):
            first = int(f.stem.rsplit("_", 1)[1].split("-")[0])
            if first > step:
                f.unlink()

    def flush(self) -> None:
        if not self.pending:
            return
        first, last = self.pending[0]["step"], self.pending[-1]["step"]
        write_rows(self.results_root, self.sweep, "train_steps",
                   f"{self.stage}_{self.run_id}_{first:06d}-{last:06d}", self.pending)
        self.pending = []


class Engine(Protocol):
    def sft(self, cfg: dict, out_dir: Path, log: TrainLog) -> Path:
        """Train from scratch on the SFT data; return the final checkpoint directory."""

    def rl(self, cfg: dict, init_ckpt: Path | None, out_dir: Path, log: TrainLog,
           on_checkpoint: Callable[[int], None] | None = None) -> Path:
        """RL from `init_ckpt` (None = fresh random init); return the final checkpoint directory.
        `on_checkpoint(step)` is called after each interval checkpoint and may raise to stop the run (pruning)."""

    def generate(self, ckpt: Path, prompts: list[str], n: int, temperature: float, max_new_tokens: int,
                 seed: int) -> list[list[Sample]]:
        """n samples per prompt."""
