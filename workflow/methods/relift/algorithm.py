"""ReLIFT (Ma et al., "Learning What Reinforcement Learning Can't: Interleaved Online Fine-Tuning for Hardest
Questions", arXiv:2506.07527): RL as usual; a prompt that none of its rollouts solved goes into a buffer with its
demonstration; when the buffer holds `buffer_size` of them (or, with `every`, every that many steps whatever it
holds), the engine takes one SFT step on (at most `buffer_size` of) their demonstrations after the RL step, and
those leave the buffer; any more stay for the next one (as the official code's buffer does: TheRoadQaQ/ReLIFT)."""

from __future__ import annotations

from typing import Any

import numpy as np

from workflow.algos.mix import MixedPolicy


class ReLIFT(MixedPolicy):
    interleaves_sft = True

    def __init__(self, buffer_size: int = 16, every: int | None = None, lr_scale: float = 1.0):
        self.buffer_size, self.every, self.lr_scale = buffer_size, every, lr_scale
        self.buffer: list[Any] = []
        self.steps = 0

    def after_step(self, items: list[Any], rewards: np.ndarray) -> list[Any]:
        self.steps += 1
        unsolved = ~(rewards > 0).any(axis=1)
        self.buffer += [item for item, hard in zip(items, unsolved) if hard]
        due = len(self.buffer) >= self.buffer_size or (self.every is not None and self.steps % self.every == 0)
        if not due or not self.buffer:
            return []
        batch, self.buffer = self.buffer[: self.buffer_size], self.buffer[self.buffer_size:]
        return batch

    def step_metrics(self) -> dict[str, float]:
        return {"buffer_size": len(self.buffer)}

    def state_dict(self) -> dict:
        return {"buffer": list(self.buffer), "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.buffer, self.steps = list(state.get("buffer", [])), int(state.get("steps", 0))
