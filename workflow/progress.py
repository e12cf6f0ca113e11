"""Progress lines for long stages.

Several stages run at once under Snakemake (and land in log files under SLURM), so instead of redrawn bars that
would overwrite each other this prints one compact line at most every `every_s` seconds, plus the last step.
"""

from __future__ import annotations

import time

from rich.console import Console

_console = Console(stderr=True, highlight=False)


class StepProgress:
    def __init__(self, label: str, total: int, start: int = 0, every_s: float = 5.0):
        self.label, self.total, self.start = label, total, start
        self.every_s = every_s
        self.t0 = self.last = time.monotonic()

    def update(self, step: int, **metrics: float) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s and step < self.total:
            return
        self.last = now
        done = step - self.start
        eta = (now - self.t0) / done * (self.total - step) if done > 0 else float("nan")
        shown = " ".join(f"{k}={v:.3g}" for k, v in metrics.items() if v is not None)
        _console.print(f"[bold cyan]{self.label}[/] {step}/{self.total} ({100 * step / self.total:3.0f}%) "
                       f"{shown} [dim]{now - self.t0:.0f}s elapsed, eta {eta:.0f}s[/]")


def say(message: str) -> None:
    _console.print(message, soft_wrap=True)  # one line whatever the width: a path in it stays whole to copy
