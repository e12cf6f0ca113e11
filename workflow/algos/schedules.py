"""Learning-rate schedules as multipliers of the base lr (for torch's LambdaLR)."""

from __future__ import annotations

import contextlib
import math
from typing import Callable


def warmup_cosine(total_steps: int, warmup_ratio: float, min_ratio: float) -> Callable[[int], float]:
    """Linear warm-up to 1 over warmup_ratio * total steps, then cosine decay to min_ratio at the last step."""
    warmup = int(round(warmup_ratio * total_steps))

    def factor(step: int) -> float:  # `step` = optimizer steps taken so far
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def constant() -> Callable[[int], float]:
    return lambda step: 1.0


def warmup_constant(warmup_steps: int) -> Callable[[int], float]:
    """Linear warm-up to 1 over `warmup_steps` optimizer steps ((step + 1) / warmup_steps: the first step already
    moves), then constant. (verl's constant schedule with warm-up takes step / warmup_steps: its first step is at
    lr 0, so the same setting on verl reaches full lr one step later.)"""
    return lambda step: min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else 1.0


@contextlib.contextmanager
def scaled_lr(optimizer, factor: float):
    """Every param group's learning rate of a torch optimizer times `factor` for the optimizer steps inside the
    block (ReLIFT's interleaved SFT step, on both engines), put back after."""
    saved = [g["lr"] for g in optimizer.param_groups]
    for g in optimizer.param_groups:
        g["lr"] *= factor
    try:
        yield
    finally:
        for g, lr in zip(optimizer.param_groups, saved):
            g["lr"] = lr
