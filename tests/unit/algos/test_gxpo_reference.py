"""GXPO's chunked arithmetic (foreach ops over the pieces of a chunk, issue 64) against the paper's step written
naively, tensor by tensor, in float64: the repositioned weights and every logged diagnostic, on tensors of many
sizes and shapes, in float32, bfloat16 and a mix of the two."""

from __future__ import annotations

import math

import pytest
import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import workflow.methods.gxpo.algorithm as gxpo
from workflow.methods.gxpo.algorithm import GXPO

SHAPES = [(20, 35), (3,), (8, 8), (5,), (1,), (300,), (2,), (2,), (129,), (16, 16), (7,), (1000,), (17,), (4, 4)]
DTYPES = {"float32": [torch.float32], "bfloat16": [torch.bfloat16], "mixed": [torch.float32, torch.bfloat16]}
# |new - reference|: the reference is exact (float64); GXPO computes in the weights' dtype. float32 rounds the ratio
# and the scale at ~1e-7; bfloat16 at ~4e-3, which near r = -1 moves s by several per cent, and rounds each weight to
# 2^-8 of itself. A coordinate worked with another's values, or not repositioned, is off by ~ its displacement
# (up to 0.05 here).
WEIGHT_TOLERANCE = {torch.float32: dict(rtol=1e-6, atol=1e-6), torch.bfloat16: dict(rtol=2 ** -7, atol=5e-3)}
DIAGNOSTIC_TOLERANCE = {"float32": 1e-6, "bfloat16": 5e-3, "mixed": 5e-3}


def _params(dtypes: list[torch.dtype]) -> list[torch.nn.Parameter]:
    """Tensors of a model's mix of sizes and shapes (the last one gets no gradient), dtypes taken in turn."""
    g = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter((0.1 * torch.randn(shape, generator=g)).to(dtypes[i % len(dtypes)]))
            for i, shape in enumerate(SHAPES)]


def _recorded_step(rule: GXPO, params: list[torch.nn.Parameter]):
    """One step on a quadratic with a quartic term, one curvature per coordinate (ratios spread over about
    (-1, 1)) and a tenth of the coordinates at their minimum (no gradient: off the active set), by SGD with
    momentum and a binding clip. Returns the float64 weights before each backward pass, the unclipped gradients
    after it, the weights after the second optimizer step (theta2) and the step's diagnostics."""
    trained = params[:-1]
    g = torch.Generator().manual_seed(1)
    curvature = [torch.rand(p.shape, generator=g) * 15.9 + 0.1 for p in trained]
    at_minimum = [torch.rand(p.shape, generator=g) < 0.1 for p in trained]
    target = [torch.where(m, p.detach().float(), p.detach().float() + 0.01 * torch.randn(p.shape, generator=g))
              for p, m in zip(trained, at_minimum)]
    opt = torch.optim.SGD(trained, lr=0.2, momentum=0.5)
    points, grads, after_step = [], [], []

    def closure():
        opt.zero_grad(set_to_none=True)
        points.append([p.detach().double() for p in trained])
        loss = sum((0.5 * lam * (p.float() - c) ** 2 + 50 * (p.float() - c) ** 4).sum()
                   for lam, c, p in zip(curvature, target, trained))
        loss.backward()
        grads.append([p.grad.double() for p in trained])
        return loss

    step = opt.step

    def recorded_step(*args, **kwargs):
        out = step(*args, **kwargs)
        after_step.append([p.detach().double() for p in trained])
        return out
    opt.step = recorded_step
    stats = rule.step(params, opt, closure)
    assert len(points) == 3 and len(after_step) == 3
    return points, grads, after_step[1], stats.diagnostics


def _reference(points, grads, theta2, K, alpha, ratio_source, clamp, eps=1e-8):
    """The repositioned weights and the diagnostics, each tensor whole, in float64."""
    (theta0, theta1, _), (g0, g1, g_corr) = points, grads
    lo, hi = (-1.0 + 1e-3, 1.0) if clamp == "r" else (0.0, float(K))
    new, samples, s_sum, active, total = [], [], 0.0, 0.0, 0
    for t0, t1, t2, a, b in zip(theta0, theta1, theta2, g0, g1):
        num, den = (b, a) if ratio_source == "grad" else (t2 - t1, t1 - t0)
        act = den.abs() > eps
        r = torch.where(act, num / torch.where(act, den, torch.ones_like(den)), torch.zeros_like(den))
        if clamp == "r":
            r = r.clamp(lo, hi)
        q, m = r * r, K // 2
        s = sum(q ** i for i in range(m)) + (q ** m / (1 + r) if K % 2 else 0)  # (1 - r^K) / (1 - r^2)
        s = s.clamp(lo, hi) if clamp == "s" else torch.nan_to_num(s, nan=1.0, posinf=1.0, neginf=1.0)
        new.append(t0 + alpha * s * (t2 - t0))
        stride = max(1, r.numel() // 256)
        samples.append(r.reshape(-1)[::stride][act.reshape(-1)[::stride]])
        s_sum, active, total = s_sum + float(s.sum()), active + float(act.sum()), total + r.numel()
    quantiles = torch.quantile(torch.cat(samples), torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)).tolist()
    dot = sum(float((a * c).sum()) for a, c in zip(g0, g_corr))
    norm0, norm_c = (math.sqrt(sum(float((x * x).sum()) for x in g)) for g in (g0, g_corr))
    return new, {"gxpo_ratio_p10": quantiles[0], "gxpo_ratio_p50": quantiles[1], "gxpo_ratio_p90": quantiles[2],
                 "gxpo_scale_mean": s_sum / total, "gxpo_inactive_frac": 1.0 - active / total,
                 "gxpo_cos_g0_gcorr": dot / (norm0 * norm_c), "gxpo_gcorr_norm": norm_c}


@pytest.mark.parametrize("dtypes", list(DTYPES))
@pytest.mark.parametrize("chunk", [128, None])  # packed chunks of many pieces and big tensors in several; the default
@pytest.mark.parametrize("K,ratio_source,clamp", [(3, "grad", "s"), (5, "displacement", "s"), (4, "displacement", "r"),
                                                  (4, "grad", "none"), (10, "grad", "s")])
def test_gxpo_step_equals_the_per_tensor_reference(K, ratio_source, clamp, chunk, dtypes, monkeypatch):
    if chunk is not None:
        monkeypatch.setattr(gxpo, "chunk_size", lambda device: chunk)
    params = _params(DTYPES[dtypes])
    untouched = params[-1].detach().clone()
    rule = GXPO(K=K, alpha=0.7, ratio_source=ratio_source, clamp=clamp, max_grad_norm=3.0)
    points, grads, theta2, diag = _recorded_step(rule, params)
    expected, expected_diag = _reference(points, grads, theta2, K, 0.7, ratio_source, clamp)
    if chunk is not None and dtypes != "mixed":  # the plan did pack tensors together and split the big ones
        assert any(len(c.pieces) > 1 for c in rule._chunks) and any(len(c.pieces) == 1 for c in rule._chunks)
    for p, got, want in zip(params, points[2], expected):  # the repositioned point: where the corrective pass ran
        torch.testing.assert_close(got, want, **WEIGHT_TOLERANCE[p.dtype])
    assert torch.equal(params[-1].detach(), untouched)  # no gradient: untouched
    assert diag.keys() == expected_diag.keys()
    for k, want in expected_diag.items():
        tolerance = DIAGNOSTIC_TOLERANCE[dtypes]
        assert diag[k] == pytest.approx(want, rel=tolerance, abs=tolerance), k


@pytest.mark.parametrize("K", [3, 5])
def test_gxpo_clamping_ratios_in_bfloat16_keeps_an_odd_ks_weights_finite(K):
    """clamp r's default floor, -1 + 1e-3, is -1 in bfloat16, where an odd K's scale 1/(1 + r) is infinite."""
    params = _params([torch.bfloat16])
    rule = GXPO(K=K, alpha=0.7, ratio_source="grad", clamp="r", max_grad_norm=3.0)
    points, _, _, diag = _recorded_step(rule, params)
    assert diag["gxpo_ratio_p10"] < -0.5  # the step's ratios reach towards -1
    assert all(torch.isfinite(p).all() for p in points[2]) and all(math.isfinite(v) for v in diag.values())


class LargestAllocation(TorchDispatchMode):
    """The largest tensor an op made while active (not a view, not an op's output into its own or given memory)."""

    def __init__(self):
        super().__init__()
        self.numel, self.paused = 0, False

    def paused_while(self, fn):
        def run(*args, **kwargs):
            self.paused = True
            try:
                return fn(*args, **kwargs)
            finally:
                self.paused = False
        return run

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self.paused and not func.is_view:
            given = {t.untyped_storage().data_ptr() for t in pytree.tree_leaves((args, kwargs))
                     if isinstance(t, torch.Tensor)}
            made = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)
                    and t.untyped_storage().data_ptr() not in given]
            self.numel = max([self.numel] + [t.numel() for t in made])
        return out


def test_gxpo_makes_no_temporary_bigger_than_a_chunk(monkeypatch):
    """Chunks bound GXPO's temporaries (its extra memory is theta0 and g0, 2x the parameters, plus per chunk three
    workspaces and the float64 copy its sums make inside torch, which this does not see): no op of its own
    arithmetic returns a tensor larger than a chunk, or than the quantile sample (up to 256 ratios per tensor), as an
    out-of-place foreach op over all the tensors at once would."""
    monkeypatch.setattr(gxpo, "chunk_size", lambda device: 512)
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(shape, generator=g)) for shape in [(200, 100), *SHAPES]]
    opt = torch.optim.SGD(params, lr=0.1)
    largest = LargestAllocation()

    def closure():
        opt.zero_grad(set_to_none=True)
        loss = sum((torch.sin(p) ** 2).sum() for p in params)
        loss.backward()
        return loss
    closure, opt.step = largest.paused_while(closure), largest.paused_while(opt.step)
    monkeypatch.setattr(gxpo, "clip_and_step", largest.paused_while(gxpo.clip_and_step))
    rule = GXPO(K=5, alpha=0.5)
    rule.step(params, opt, closure)  # the first step makes the kept buffers: theta0, g0 and the workspaces
    with largest:
        rule.step(params, opt, closure)
    sampled = sum(len(range(0, p.numel(), max(1, p.numel() // 256))) for p in params)
    assert max(c.size for c in rule._chunks) == 512 and sampled < 4000
    assert 0 < largest.numel <= max(512, sampled) < sum(p.numel() for p in params) // 5
