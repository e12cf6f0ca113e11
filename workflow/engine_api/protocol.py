"""The Engine interface: what trains. Evaluation samples through workflow/eval/backends.py."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from workflow.results.train_log import TrainLog
from workflow.stages import RLStage, SFTStage


class Engine(Protocol):
    def sft(self, stage: SFTStage, out_dir: Path, log: TrainLog, data: Path | None = None) -> Path:
        """Train the stage's model on its SFT data; return the final checkpoint directory. Checkpoints every
        sft.checkpoint_every steps under out_dir/checkpoints and resumes from the newest one it finds there.
        `data`: the data stage's prepared rows (workflow/data/prepare.py) for a `datasets` task, else None. An
        engine whose traits say it pretrains also takes `base`: the pretrain stage's checkpoint to start from."""

    # def pretrain(self, stage: PretrainStage, out_dir: Path, log: TrainLog) -> Path: only an engine whose traits
    # say it pretrains (EngineTraits.pretrains): the capable base, checkpointed and resumed as sft is

    def rl(self, stage: RLStage, init_ckpt: Path | None, out_dir: Path, log: TrainLog, data: Path | None = None,
           until: int | None = None) -> Path:
        """RL from `init_ckpt` (None = the model the stage names); return the final checkpoint directory.
        `until`: a segment job (workflow/segments.py, only for an engine whose traits say it trains in segments):
        resume from the newest checkpoint, train up to that step, checkpoint there and return that checkpoint."""
