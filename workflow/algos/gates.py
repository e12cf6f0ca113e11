"""One-sided z-score gates over a rolling window: SFPO's entropy trigger and GXPO's corrective-gradient-norm gate.

A gate takes plain floats, so a distributed driver can compute the value once (an all-reduced norm, a global
entropy) and every rank takes the same decision. The z-score of the current value is computed against the window
of PAST values, before the current one is inserted. During warm-up the gate only fills its window. Once tripped
it stays tripped: the rule falls back to single-backward-pass GRPO for good.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class GateResult:
    z: float | None  # None during warm-up or after the gate has tripped
    tripped_now: bool


class ZGate:
    """z = (x - mean(window)) / std(window) (population std); trips when z >= tau (inclusive) or z > tau."""

    def __init__(self, window: int, tau: float, warmup: int | None = None, inclusive: bool = False):
        if window < 2:
            raise ValueError(f"window must be >= 2, got {window}")
        if not tau > 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        self.window, self.tau, self.inclusive = window, tau, inclusive
        self.warmup = max(2, window if warmup is None else warmup)  # a std needs at least two past values
        self.values: deque[float] = deque(maxlen=window)
        self.seen = 0
        self.tripped_at: int | None = None  # the observation index (0-based) at which it tripped

    @property
    def tripped(self) -> bool:
        return self.tripped_at is not None

    def update(self, x: float) -> GateResult:
        if self.tripped:
            return GateResult(None, False)
        if not math.isfinite(x):  # a NaN/inf norm or entropy is the clearest instability signal there is
            self.tripped_at = self.seen
            self.seen += 1
            return GateResult(math.inf, True)
        z = None
        if self.seen >= self.warmup:
            mean = sum(self.values) / len(self.values)
            std = math.sqrt(sum((v - mean) ** 2 for v in self.values) / len(self.values))
            z = (x - mean) / std if std > 0 else (0.0 if x == mean else math.copysign(math.inf, x - mean))
            if z > self.tau or (self.inclusive and z == self.tau):
                self.tripped_at = self.seen
                self.seen += 1
                return GateResult(z, True)
        self.values.append(x)
        self.seen += 1
        return GateResult(z, False)

    def state_dict(self) -> dict:
        return {"values": list(self.values), "seen": self.seen, "tripped_at": self.tripped_at}

    def load_state_dict(self, state: dict) -> None:
        self.values = deque(state["values"], maxlen=self.window)
        self.seen, self.tripped_at = state["seen"], state["tripped_at"]
