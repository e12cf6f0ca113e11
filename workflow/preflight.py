"""The integrity preflight: before an SFT or mixed-policy job trains, check on a real batch of its own configuration
that the two silent bugs of Limozin et al. ("SFT-then-RL Outperforms Mixed-Policy Methods for LLM Reasoning",
arXiv:2604.23747, Section 2) cannot be happening:

  (a) gradient   the accumulated gradient is the same whatever the micro-batch split: the loss is the global token
                 mean, not a mean of per-micro-batch (or per-rank) means;
  (b) update     one optimizer step after accumulating over the job's micro-batches moves the parameters exactly as
                 one step on the whole batch does (an optimizer that only sees the first micro-batch's gradient,
                 the CPU-offload bug, fails this).

An engine supplies an `IntegrityProbe` for a stage (its model, optimizer, batch and micro-batch size); `check` calls
it and returns a Preflight, whose `problems` name the property that broke and by how much. Call order on a probe:
`gradient(m)` for each split m (no update), then `update(m)` for the job's split and for the whole batch, each from
the same starting parameters and optimizer state (the probe restores them).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from workflow.algos.sharded import clip_and_step
from workflow.errors import UserError

# relative L2 distance allowed between splits: float32 sums in another order differ by ~1e-7 relative; the bugs
# this catches differ by percents (a mean of means re-weights tokens by their micro-batch's length)
TOLERANCE = 1e-4
# (b) compares parameter changes, and Adam's first step divides each gradient coordinate by its own magnitude: where a
# coordinate's gradient is near 0, float reordering noise becomes a large part of its step. Measured 1.1e-4 on the LoRA
# adapters of rlsweep:smollm2-135m (~1M parameters, B = 0 at the start) with gradients 1e-7 apart; the bug (an
# optimizer that sees only the first micro-batch) moves it by 0.5-1 on every probe measured
UPDATE_TOLERANCE = 1e-3


class IntegrityProbe(Protocol):
    micro_batch_size: int | None  # the job's own split (None: the whole batch in one pass)
    n_rows: int  # sequences in the probe's batch

    def gradient(self, micro_batch_size: int | None) -> torch.Tensor:
        """The flat gradient accumulated over the batch in micro-batches of this size (None: one pass)."""

    def update(self, micro_batch_size: int | None) -> torch.Tensor:
        """The flat parameter change of one optimizer step after accumulating in micro-batches of this size."""


class IntegrityError(UserError):
    """The preflight found a broken property: the job must not train."""


@dataclass
class Preflight:
    grad_diff: float  # the largest relative L2 distance of a split's gradient from the whole batch's
    update_diff: float  # the relative L2 distance of the split update from the whole-batch update
    splits: list[int]  # the micro-batch sizes compared against the whole batch
    update_split: int | None  # the one the update check used (None: the batch has a single row)
    problems: list[str]
    vacuous: bool = False  # the batch's gradient was 0: nothing could be checked

    @property
    def passed(self) -> bool:
        return not self.problems

    def as_row(self) -> dict:
        """The `runs` columns."""
        status = "no gradient" if self.vacuous else "passed" if self.passed else "failed"
        return {"preflight": status, "preflight_grad_diff": self.grad_diff,
                "preflight_update_diff": self.update_diff}


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def plan(n: int, own: int | None) -> tuple[list[int], int | None]:
    """The splits `check` compares against the whole batch (the job's own, one sequence per micro-batch: the most
    uneven token counts, and two halves) and the one its update check uses (None: a single row, nothing to split).
    A probe that must compute its figures in one go (the verl engine's, in child processes) asks for these."""
    splits = sorted({m for m in (own, 1, math.ceil(n / 2)) if m is not None and m < n})
    return splits, own if own is not None and own < n else (math.ceil(n / 2) if n > 1 else None)


def check(probe: IntegrityProbe, tolerance: float = TOLERANCE,
          update_tolerance: float = UPDATE_TOLERANCE) -> Preflight:
    n = probe.n_rows
    splits, split = plan(n, probe.micro_batch_size)
    problems = []
    whole = probe.gradient(None)
    if float(whole.norm()) == 0.0:  # nothing to compare (an RL batch whose every advantage is 0): not a pass
        return Preflight(0.0, 0.0, splits, None, [], vacuous=True)
    grad_diff, worst = 0.0, None
    for m in splits:
        diff = relative(probe.gradient(m), whole)
        if diff > grad_diff:
            grad_diff, worst = diff, m
    if grad_diff > tolerance:
        problems.append(f"(a) gradient: micro-batches of {worst} sequence(s) give a gradient {grad_diff:.3g} (relative "
                        f"L2) away from the whole batch's (tolerance {tolerance:g}): the loss is not the global token "
                        "mean (a mean of per-micro-batch means?)")
    update_diff = relative(probe.update(split), probe.update(None)) if split is not None else 0.0
    if update_diff > update_tolerance:
        why = ("it follows from (a)" if problems else
               "the optimizer does not apply the whole accumulated gradient (only the first micro-batch's?)")
        problems.append(f"(b) update: one optimizer step after {math.ceil(n / split)} micro-batches of {split} moves "
                        f"the parameters {update_diff:.3g} (relative L2) away from one step on the whole batch "
                        f"(tolerance {update_tolerance:g}): {why}")
    return Preflight(grad_diff, update_diff, splits, split, problems)


def enforce(result: Preflight, what: str) -> None:
    if not result.passed:
        raise IntegrityError(f"integrity preflight of {what} failed; it must not train:\n  "
                             + "\n  ".join(result.problems))


class TorchProbe:
    """A probe over a torch model: `backward(m)` accumulates the batch's loss gradient in micro-batches of m into
    the parameters' .grad (without zeroing it); `optimizer` is the job's own (its class, settings and state)."""

    def __init__(self, params: list[torch.Tensor], optimizer: torch.optim.Optimizer,
                 backward: Callable[[int | None], object], n_rows: int, micro_batch_size: int | None,
                 max_grad_norm: float | None):
        self.params, self.optimizer, self.backward = params, optimizer, backward
        self.n_rows, self.micro_batch_size, self.max_grad_norm = n_rows, micro_batch_size, max_grad_norm

    def _zero(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        for p in self.params:
            p.grad = None

    def gradient(self, micro_batch_size: int | None) -> torch.Tensor:
        self._zero()
        self.backward(micro_batch_size)
        grads = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in self.params])
        self._zero()
        return grads.detach().clone()

    def update(self, micro_batch_size: int | None) -> torch.Tensor:
        before = [p.detach().clone() for p in self.params]
        state = copy.deepcopy(self.optimizer.state_dict())
        # a warm-up schedule starts at lr 0, where every update is 0 and the comparison says nothing: use the base lr
        for g in self.optimizer.param_groups:
            g["lr"] = g["lr"] or g.get("initial_lr", 1e-3)
        self._zero()
        self.backward(micro_batch_size)
        clip_and_step(self.params, self.optimizer, self.max_grad_norm)
        delta = torch.cat([(p.detach() - b).reshape(-1) for p, b in zip(self.params, before)])
        with torch.no_grad():
            for p, b in zip(self.params, before):
                p.copy_(b)
        self.optimizer.load_state_dict(state)  # lr included
        self._zero()
        return delta
