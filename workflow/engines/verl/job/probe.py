"""The integrity preflight's probe on verl, as the stage job holds it (workflow/preflight.py checks it): its figures
come from a torchrun child (torchrun/preflight.py) that the engine starts (engine.py, integrity_probe); the request
and figures name each split as the contract does (contract.split_key)."""

from __future__ import annotations

import tempfile
from typing import Callable

import torch

from workflow.engines.verl.contract import split_key
from workflow.preflight import plan


def probe_rows(per_rank_job: int, micro: int, ranks: int, available: int) -> int:
    """How many rows the probe trains on: per rank, two of the job's micro-batches when the job accumulates (so
    the job's own split has something to accumulate) but no more than the job's share, at least 2 (a split)."""
    per_rank = max(2, min(per_rank_job, 2 * micro))
    return max(1, min(per_rank, available // ranks)) * ranks


class VerlProbe:
    """An IntegrityProbe whose figures a child process computes. `run(request)` runs it and returns the figures
    ({"gradients": {key: tensor}, "updates": {key: tensor}}); the splits `check` will ask for are computed in one
    run when the probe is made, any other split runs the child again."""

    def __init__(self, run: Callable[[dict], dict], n_rows: int, micro_batch_size: int | None, ranks: int,
                 workdir: tempfile.TemporaryDirectory | None = None):
        self.run, self.n_rows, self.micro_batch_size, self.ranks = run, n_rows, micro_batch_size, ranks
        self.workdir = workdir  # the config and rows the child reads: kept as long as the probe lives
        splits, split = plan(n_rows, micro_batch_size)
        self.figures = run({"gradients": [None, *splits], "updates": [split, None] if split else []})

    def _get(self, kind: str, m: int | None) -> torch.Tensor:
        if split_key(m) not in self.figures[kind]:
            self.figures[kind].update(self.run({"gradients": [], "updates": [], kind: [m]})[kind])
        return self.figures[kind][split_key(m)]

    def gradient(self, micro_batch_size: int | None) -> torch.Tensor:
        return self._get("gradients", micro_batch_size)

    def update(self, micro_batch_size: int | None) -> torch.Tensor:
        return self._get("updates", micro_batch_size)
