"""Slow2Fast sampling's rule (workflow/algos/fast_grpo.py): which of a step's groups to keep, by the group's accuracy
and the phase of training. The engines drop and refill groups around it (workflow/engines/rl_batch.py;
verl: verl.py here)."""

from __future__ import annotations

import numpy as np

from workflow.algos.part import Part


def slow2fast_keep(accuracy: np.ndarray, progress: float, cfg) -> np.ndarray:
    """Which groups the schedule's phase at `progress` (share of training done, 0..1) keeps: bool [P]."""
    low, high = cfg.slow if progress < cfg.switch else cfg.fast
    accuracy = np.asarray(accuracy, float)
    return (accuracy >= low) & (accuracy <= high)


class Slow2Fast(Part):
    """The part: keeps the groups of the phase's band; with refill resample, up to max_rounds extra rounds of prompts
    replace the dropped ones."""

    filters_groups = True

    def __init__(self, cfg):
        super().__init__(cfg)
        self.refill_rounds = cfg.max_rounds if cfg.refill == "resample" else 0

    def keep(self, accuracy: np.ndarray, progress: float) -> np.ndarray:
        return slow2fast_keep(accuracy, progress, self.cfg)
