"""Small problems the update rules' tests share (tests/unit/algos/test_update_rules.py, the FSDP2 ranks of
tests/unit/engines/test_distributed.py, LoRA's GXPO check in tests/unit/engines/test_lora.py): a float64 MLP and its
closure, and the paper's GXPO reposition written naively."""

from __future__ import annotations

import torch


def mlp_problem(seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).to(dtype)
    x, y = torch.randn(32, 6, dtype=dtype), torch.randn(32, 3, dtype=dtype)
    return model, x, y


def mlp_closure(model, opt, x, y, scale=lambda: 1.0):
    def closure():
        opt.zero_grad(set_to_none=True)
        loss = ((model(x) - y) ** 2).mean() * scale()
        loss.backward()
        return loss
    return closure


def reference_gxpo_point(theta0, g0, theta1, g1, theta2, K, alpha, eps):
    """The paper's reposition, written naively on full tensors."""
    out = []
    for t0, a, b, t2 in zip(theta0, g0, g1, theta2):
        act = a.abs() > eps
        r = torch.where(act, b / torch.where(act, a, torch.ones_like(a)), torch.zeros_like(a))
        s = torch.where(act, ((1 - r ** K) / (1 - r ** 2)).clamp(0, K), torch.ones_like(a))
        out.append(t0 + alpha * s * (t2 - t0))
    return out
