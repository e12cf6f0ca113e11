"""Gradient Extrapolation Policy Optimization: 2 probes, a per-coordinate retention ratio r, the geometric scale
s = (1 - r^K) / (1 - r^2), reposition theta0 + alpha s (theta2 - theta0), 1 corrective step: 3 backward passes for
any K. Its gate (z > tau of the corrective-gradient norm against a window of past norms) switches it to plain GRPO
for good."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor

from workflow.algos.gates import ZGate
from workflow.algos.rule import MultiPassRule, StepStats
from workflow.algos.sharded import (all_reduce_sum, chunk_size, chunked_dot, clip_and_step, local, process_group,
                                    with_grad)

QUANTILE_SAMPLE = 1 << 16  # ratios kept for the quantile diagnostics


def geometric_scale(r: Tensor, K: int, out: Tensor | None = None, q: Tensor | None = None,
                    one: Tensor | None = None) -> Tensor:
    """s(r) = (1 - r^K) / (1 - r^2) = sum_{j<K} r^j / (1 + r), evaluated without cancellation and without powers.
    `r` is used as scratch space (overwritten) when K is odd; `out` and `q` are optional workspaces, `one` a 0-dim
    1 on r's device (made here when not given: a CUDA kernel refuses a CPU tensor as addcmul's input).

    With q = r^2 and m = floor(K/2), Horner's scheme (one fused multiply-add pass per term):
      K even: s = 1 + q (1 + q (... (1 + q)))          = sum_{i<m} q^i   (exact limits K/2 at r = 1 and r = -1)
      K odd:  s = 1 + q (1 + q (... (1 + q / (1 + r)))) = sum_{i<m} q^i + q^m / (1 + r)   (inf only at r = -1)
    r = 0 gives s = 1 exactly."""
    m = K // 2
    q = torch.mul(r, r, out=q) if q is not None else r * r
    s = out if out is not None else torch.empty_like(r)
    if K % 2:
        torch.reciprocal(r.add_(1.0), out=s)
        iterations = m
    elif m >= 2:
        torch.add(q, 1.0, out=s)
        iterations = m - 2
    else:  # K = 2
        s.fill_(1.0)
        iterations = 0
    if iterations:
        one = one if one is not None else r.new_ones(())
    for _ in range(iterations):
        torch.addcmul(one, s, q, out=s)  # s <- 1 + s * q
    return s


class GXPO(MultiPassRule):
    """Gradient Extrapolation Policy Optimization (3 backward passes per active step for any K).

    ratio_source   'grad': r = g1 / g0 on |g0| > eps (the paper);  'displacement': r = (theta2 - theta1) /
                   (theta1 - theta0) on |theta1 - theta0| > eps (the optimizer-aware variant; +1 parameter copy)
    clamp          'r' or 's' (default 's' in [0, K]) or 'none'; coordinates off the active set keep s = 1 (the
                   observed two-probe displacement).
    Extra memory: theta0 and g0 (2x the parameters; 3x with ratio_source='displacement'). The ratio uses the clipped
    g1 still in .grad after the second optimizer step, divided by its clip coefficient (one scalar), instead of a
    third copy; this needs an optimizer whose step() leaves .grad untouched (every torch.optim optimizer with
    maximize=False).
    """

    gate_phase, gate_signal = "step", "gxpo_gcorr_norm"

    def __init__(self, K: int, alpha: float, eps: float = 1e-8, window: int = 20, warmup: int = 10,
                 tau: float = 2.0, ratio_source: str = "grad", clamp: str = "s", clamp_min: float | None = None,
                 clamp_max: float | None = None, max_grad_norm: float | None = 1.0, gate_here: bool = True):
        super().__init__(max_grad_norm, gate_here)
        if K < 2:
            raise ValueError(f"GXPO needs K >= 2, got {K}")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if ratio_source not in ("grad", "displacement"):
            raise ValueError(f"ratio_source must be 'grad' or 'displacement', got {ratio_source!r}")
        if clamp not in ("r", "s", "none"):
            raise ValueError(f"clamp must be 'r', 's' or 'none', got {clamp!r}")
        self.K, self.alpha, self.eps, self.ratio_source, self.clamp = K, alpha, eps, ratio_source, clamp
        default = (-1.0 + 1e-3, 1.0) if clamp == "r" else (0.0, float(K))
        self.clamp_min = default[0] if clamp_min is None else clamp_min
        self.clamp_max = default[1] if clamp_max is None else clamp_max
        if gate_here:
            self.gate = ZGate(window, tau, warmup=warmup, inclusive=False)  # the paper's gate is z > tau

    def moves(self) -> bool:
        return self.alpha != 0.0

    @classmethod
    def gate_value(cls, values):
        # A batch without learning signal (every group's rewards equal, no KL) has a zero gradient everywhere; its
        # norm says nothing about stability and would drag the window's mean to 0, so the gate does not see it.
        norm = values.get("gxpo_gcorr_norm")
        return float(norm) if norm is not None and float(norm) > 0 else None

    def multi_pass(self, params, optimizer, closure) -> StepStats:
        if any(g.get("maximize", False) for g in optimizer.param_groups):
            raise ValueError("GXPO needs optimizer.step() to leave .grad untouched; maximize=True modifies it")
        group = process_group(params)

        loss = float(closure().detach())  # probe 1 at theta0
        active = with_grad(params)
        with torch.no_grad():
            g0 = self.snapshot("g0", [local(p.grad).detach() for p in active])  # copied before in-place clipping
            theta0 = self.snapshot("theta0", [local(p).detach() for p in active])
        norm0, _ = clip_and_step(params, optimizer, self.max_grad_norm, group)
        d0 = None
        if self.ratio_source == "displacement":
            with torch.no_grad():
                d0 = torch._foreach_sub([local(p) for p in active], theta0)  # theta1 - theta0

        closure()  # probe 2 at theta1
        _, coef1 = clip_and_step(params, optimizer, self.max_grad_norm, group)

        with torch.no_grad():  # s per coordinate and theta <- theta0 + alpha * s * (theta2 - theta0), in place
            diag = self._extrapolate([local(p) for p in active], [local(p.grad) for p in active], g0, theta0, d0,
                                     coef1, group)
            del d0

        closure()  # corrective gradient at the repositioned point
        with torch.no_grad():
            dot = torch.stack([chunked_dot(a, local(p.grad)) for a, p in zip(g0, active)]).sum()
            dot = all_reduce_sum(dot.reshape(1), group)
        norm_c, _ = clip_and_step(params, optimizer, self.max_grad_norm, group)
        diag["gxpo_cos_g0_gcorr"] = float(dot) / (norm0 * norm_c) if norm0 > 0 and norm_c > 0 else float("nan")
        diag["gxpo_gcorr_norm"] = norm_c
        return StepStats(loss=loss, grad_norm=norm0, backward_passes=3, optimizer_steps=3, alpha=self.alpha,
                         diagnostics=diag)

    def _extrapolate(self, theta: list[Tensor], g1: list[Tensor], g0: list[Tensor], theta0: list[Tensor],
                     d0: list[Tensor] | None, coef1: float, group) -> dict[str, float]:
        """Reposition `theta` (holding theta2) in place to theta0 + alpha * s * (theta2 - theta0); return the
        diagnostics. `g1` holds the clipped second gradient (clip coefficient coef1).

        Works chunk by chunk and repositions each chunk while its s is still in cache: s is never written to
        memory, so the extrapolation reads theta2, theta0, g0 and g1 once and writes theta once."""
        # Everything below stays on the parameters' device: the sums accumulate there (no host sync per chunk) and
        # the quantile sample is masked once at the end, so a GPU step waits for the host only for its diagnostics.
        dev = theta[0].device if theta else torch.device("cpu")
        s_sum = torch.zeros((), dtype=torch.float64, device=dev)
        active_count = torch.zeros((), dtype=torch.float64, device=dev)
        total = 0
        samples: list[Tensor] = []
        sampled_active: list[Tensor] = []
        work = one = None
        for i, (th, a, b, t0) in enumerate(zip(theta, g0, g1, theta0)):
            n = th.numel()
            total += n
            stride = max(1, n // 256)  # a few hundred ratios per tensor for the quantile diagnostics
            th, a, b, t0 = th.view(-1), a.view(-1), b.view(-1), t0.view(-1)
            dd = d0[i].view(-1) if d0 is not None else None
            if work is None or work[0].dtype != th.dtype or work[0].device != th.device:
                chunk = chunk_size(th.device)
                work = [torch.empty(min(chunk, max(t.numel() for t in theta)), dtype=th.dtype, device=th.device)
                        for _ in range(4)]
                one = torch.ones((), dtype=th.dtype, device=th.device)
            for start in range(0, n, chunk):
                sl = slice(start, min(start + chunk, n))
                act, r, q, s = (w[: sl.stop - start] for w in work)
                if dd is None:  # r = g1 / g0 on |g0| > eps; g1 unclipped = clipped g1 / clip coefficient
                    den, num = a[sl], b[sl]
                else:  # r = (theta2 - theta1) / (theta1 - theta0), with theta1 - theta0 = d0
                    den = dd[sl]
                    num = torch.sub(th[sl], t0[sl], out=q).sub_(den)
                # Off the active set r = 0, which gives s = 1 exactly (keep the observed displacement). Float masks,
                # not boolean ones: on CPU, comparisons into bool tensors and masked_fill are several times slower
                # than arithmetic. (1 - act) + den is den itself, exactly, on the active set, and never 0 off it.
                torch.abs(den, out=act).gt_(self.eps)
                torch.mul(num, act, out=r).div_(torch.sub(one, act, out=s).add_(den))
                if dd is None and coef1 != 1.0:
                    r.mul_(1.0 / coef1)
                if self.clamp == "r":
                    r.clamp_(self.clamp_min, self.clamp_max)
                first = (-start) % stride  # sample every stride-th coordinate of the whole tensor
                samples.append(r[first::stride].clone())  # (r is scratch below: copied before geometric_scale)
                sampled_active.append(act[first::stride] > 0)
                active_count += act.sum(dtype=torch.float64)
                s = geometric_scale(r, self.K, out=s, q=q, one=one)
                if self.clamp == "s":
                    s.clamp_(self.clamp_min, self.clamp_max)
                elif self.clamp == "none":
                    torch.nan_to_num_(s, nan=1.0, posinf=1.0, neginf=1.0)
                s_sum += s.sum(dtype=torch.float64)
                # theta <- theta0 + alpha * s * (theta2 - theta0) = lerp(theta0, theta2, alpha * s), while s is in cache
                torch.lerp(t0[sl], th[sl], s.mul_(self.alpha), out=th[sl])
        sums = all_reduce_sum(torch.stack([s_sum, active_count,
                                           torch.tensor(float(total), dtype=torch.float64, device=dev)]), group)
        sample = (torch.cat(samples)[torch.cat(sampled_active)] if samples
                  else torch.zeros(0, dtype=torch.float64, device=dev))
        if sample.numel() > QUANTILE_SAMPLE:
            sample = sample[torch.linspace(0, sample.numel() - 1, QUANTILE_SAMPLE, device=sample.device).long()]
        if group is not None:
            gathered: list = [None] * dist.get_world_size(group)
            # pickled as CPU tensors: a CUDA tensor would unpickle onto the sender's device index on every rank
            dist.all_gather_object(gathered, sample.cpu(), group=group)
            sample = torch.cat(gathered).to(dev)
        q = (torch.quantile(sample.double(), torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64,
                                                          device=sample.device)).tolist()
             if sample.numel() else [math.nan] * 3)
        return {"gxpo_ratio_p10": q[0], "gxpo_ratio_p50": q[1], "gxpo_ratio_p90": q[2],
                "gxpo_scale_mean": float(sums[0] / sums[2]), "gxpo_inactive_frac": float(1.0 - sums[1] / sums[2])}


