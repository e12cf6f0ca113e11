"""Update rules: how one training step turns a loss on ONE rollout batch into parameter updates.

The interface is deliberately tiny so the same rule runs in the local engine and inside verl's workers:

    rule.step(params, optimizer, closure) -> StepStats

`closure()` zeroes the gradients, runs forward + backward on the same rollout batch and returns the loss;
`optimizer.step()` applies one optimizer update. The learning-rate scheduler is NOT stepped here: it steps once
per training step in the engine, whatever number of inner optimizer steps a rule takes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Protocol

import torch
from torch import Tensor
from torch.optim import Optimizer


@dataclass
class StepStats:
    loss: float
    grad_norm: float | None
    backward_passes: int
    optimizer_steps: int
    alpha: float | None = None
    z: float | None = None
    gate_tripped: bool = False
    diagnostics: dict[str, float] = field(default_factory=dict)  # rule-specific (GXPO ratio quantiles, ...)

    def as_row(self) -> dict:
        row = asdict(self)
        row.update(row.pop("diagnostics"))
        return row


class UpdateRule(Protocol):
    def step(self, params: list[Tensor], optimizer: Optimizer, closure: Callable[[], Tensor]) -> StepStats: ...


def clip_and_step(params: list[Tensor], optimizer: Optimizer, max_grad_norm: float | None) -> float:
    """Clip the gradient norm in place (if configured) and take one optimizer step; returns the pre-clip norm."""
    grads = [p for p in params if p.grad is not None]
    if max_grad_norm is not None:
        norm = torch.nn.utils.clip_grad_norm_(grads, max_grad_norm)
    else:
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in grads]))
    optimizer.step()
    return float(norm)


class GRPOStep:
    """Plain on-policy step: one closure (one backward pass), one optimizer step."""

    def __init__(self, max_grad_norm: float | None = 1.0):
        self.max_grad_norm = max_grad_norm

    def step(self, params: list[Tensor], optimizer: Optimizer, closure: Callable[[], Tensor]) -> StepStats:
        loss = closure()
        norm = clip_and_step(params, optimizer, self.max_grad_norm)
        return StepStats(loss=float(loss.detach()), grad_norm=norm, backward_passes=1, optimizer_steps=1)

    # Rules with gates (SFPO, GXPO) keep state that must survive a restart; GRPO has none.
    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def make_update_rule(rl_cfg) -> GRPOStep:
    if rl_cfg.update == "grpo":
        return GRPOStep(max_grad_norm=rl_cfg.max_grad_norm)
    raise ValueError(f"unknown update rule {rl_cfg.update!r}")
