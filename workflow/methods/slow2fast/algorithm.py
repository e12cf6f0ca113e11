"""Slow2Fast sampling's rule (workflow/algos/fast_grpo.py): which of a step's groups to keep, by the group's accuracy
and the phase of training. The engines drop and refill groups around it (workflow/engines/rl_batch.py;
verl: workflow/engines/verl/inside/slow2fast.py)."""

from __future__ import annotations

import numpy as np


def slow2fast_keep(accuracy: np.ndarray, progress: float, cfg) -> np.ndarray:
    """Which groups the schedule's phase at `progress` (share of training done, 0..1) keeps: bool [P]."""
    low, high = cfg.slow if progress < cfg.switch else cfg.fast
    accuracy = np.asarray(accuracy, float)
    return (accuracy >= low) & (accuracy <= high)
