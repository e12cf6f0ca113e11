"""Progress lines for long stages.

Several stages run at once under Snakemake (and land in log files under SLURM), so instead of redrawn bars that
would overwrite each other this prints one compact line at most every `every_s` seconds, plus the last step.
"""

from __future__ import annotations

import os
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


def tqdm_lines(label: str, every_s: float = 5.0) -> type:
    """A tqdm class for a library that draws its own bars (vLLM's `generate(..., use_tqdm=...)`): nothing is drawn,
    and a bar that lasts longer than `every_s` becomes our progress lines ("<label> <its desc> n/total ..."); a
    quicker one (vLLM rendering the prompts) prints nothing, since the caller's own lines say when it starts and
    ends. tqdm is imported here, by the caller that has a library drawing bars (vLLM brings it)."""
    from tqdm import tqdm

    class Lines(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.update(file=open(os.devnull, "w"), disable=False)  # noqa: SIM115 - closed in close()
            super().__init__(*args, **kwargs)
            self._lines = StepProgress(f"{label} {self.desc}".strip(), max(int(self.total or 0), 1), every_s=every_s)
            self._since, self._finished = time.monotonic(), False

        def update(self, n=1):
            out = super().update(n)
            if self.total and not self._finished and time.monotonic() - self._since >= every_s:
                step = min(int(self.n), int(self.total))  # (vLLM counts a prompt's n samples against its prompts)
                self._lines.update(step)
                self._finished = step >= self.total
            return out

        def close(self):
            file = self.fp
            super().close()
            file.close()

    return Lines
