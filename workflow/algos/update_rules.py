"""Update rules: how one training step turns a loss on ONE rollout batch into parameter updates.

The interface is deliberately tiny so the same rule runs in the local engine and inside verl's workers:

    rule.on_rollout({"entropy": H})                      # optional: per-step signals for gates (plain floats)
    rule.step(params, optimizer, closure) -> StepStats

`closure()` zeroes the gradients, runs forward + backward on the same rollout batch and returns the loss;
`optimizer.step()` applies one optimizer update. The learning-rate scheduler is NOT stepped here: it steps once per
training step in the engine, however many inner optimizer steps a rule takes.

Rules work with any torch optimizer and with FSDP2-sharded parameters (DTensor, Shard(0)): all elementwise math
runs on the local shards, and the few reductions (norms, counts, a dot product, a quantile sample) are all-reduced
over the parameters' device mesh, so every rank computes the same scalars.

  GRPOStep  1 closure + 1 optimizer step.
  SFPO      K fast (closure + step), reposition theta0 + alpha (thetaK - theta0), 1 slow: K + 1 backward passes.
            Entropy trigger: once tripped (or with alpha = 0) it is GRPOStep for good.
  GXPO      2 probes, per-coordinate retention ratio r, scale s = (1 - r^K) / (1 - r^2), reposition
            theta0 + alpha s (theta2 - theta0), 1 corrective: 3 backward passes for any K.
            Corrective-gradient-norm gate: once tripped it is GRPOStep for good.
The loss and grad_norm in StepStats are those of the first closure, at the rollout policy, for every rule, so
they compare across rules.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Protocol

import torch
import torch.distributed as dist
from torch import Tensor
from torch.optim import Optimizer

from workflow.algos.gates import GateResult, ZGate

try:  # DTensor is public from torch 2.4 on
    from torch.distributed.tensor import DTensor
except ImportError:  # pragma: no cover
    DTensor = ()  # type: ignore[assignment,misc]

# Elementwise work on huge tensors runs in chunks of this many elements, so temporaries stay cache-sized and the
# extra peak memory stays at the documented number of parameter copies.
CHUNK = 1 << 18
QUANTILE_SAMPLE = 1 << 16


@dataclass
class StepStats:
    loss: float
    grad_norm: float | None
    backward_passes: int
    optimizer_steps: int
    alpha: float | None = None
    z: float | None = None
    gate_tripped: bool = False  # True on the step at which the gate tripped
    diagnostics: dict[str, float] = field(default_factory=dict)  # rule-specific (GXPO ratio quantiles, ...)

    def as_row(self) -> dict:
        row = asdict(self)
        row.update(row.pop("diagnostics"))
        return row


class UpdateRule(Protocol):
    def on_rollout(self, metrics: dict[str, float]) -> None: ...

    def step(self, params: list[Tensor], optimizer: Optimizer, closure: Callable[[], Tensor]) -> StepStats: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


# ------------------------------------------------------------------------------------------- shard-local helpers
def local(t: Tensor) -> Tensor:
    """The tensor this rank holds (the local shard of a DTensor; in-place ops on it update the DTensor)."""
    return t.to_local() if isinstance(t, DTensor) else t


def process_group(params: list[Tensor]):
    """The group to all-reduce over: the device mesh of sharded parameters, None for plain tensors."""
    for p in params:
        if isinstance(p, DTensor):
            return p.device_mesh.get_group()
    return None


def all_reduce_sum(values: Tensor, group) -> Tensor:
    if group is not None:
        dist.all_reduce(values, op=dist.ReduceOp.SUM, group=group)
    return values


def global_norm(tensors: list[Tensor], group) -> Tensor:
    if not tensors:
        return torch.zeros(())
    norms = torch._foreach_norm([local(t) for t in tensors])
    sq = torch.stack([n.double() ** 2 for n in norms]).sum()
    return all_reduce_sum(sq, group).sqrt()


def clip_and_step(params: list[Tensor], optimizer: Optimizer, max_grad_norm: float | None,
                  group=None) -> tuple[float, float]:
    """Clip the global gradient norm in place (if configured), take one optimizer step.

    Returns (pre-clip norm, clip coefficient). The coefficient is one scalar for all coordinates, which is what lets
    GXPO recover the unclipped gradient exactly from the clipped one instead of keeping another copy."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = global_norm(grads, group)
    coef = 1.0
    if max_grad_norm is not None:
        coef = min(1.0, float(max_grad_norm / (norm + 1e-6)))
        if coef < 1.0:
            torch._foreach_mul_([local(g) for g in grads], coef)
    optimizer.step()
    return float(norm), coef


def chunked_dot(a: Tensor, b: Tensor) -> Tensor:
    """<a, b> accumulated in float64 over cache-sized chunks (no full-size float64 copies)."""
    a, b = a.reshape(-1), b.reshape(-1)
    total = torch.zeros((), dtype=torch.float64)
    for start in range(0, a.numel(), CHUNK):
        total += torch.dot(a[start:start + CHUNK], b[start:start + CHUNK]).double()
    return total


def _with_grad(params: list[Tensor]) -> list[Tensor]:
    return [p for p in params if p.grad is not None]


class _Rule:
    """What all rules share: grad clipping config, the single-pass GRPO step, empty gate state by default."""

    def __init__(self, max_grad_norm: float | None = 1.0):
        self.max_grad_norm = max_grad_norm
        self._buffers: dict[str, list[Tensor]] = {}

    def snapshot(self, name: str, tensors: list[Tensor]) -> list[Tensor]:
        """A copy of `tensors` in buffers kept from step to step: the memory is the same as fresh clones, but
        allocating (and on CPU page-faulting) a parameter-sized copy every step costs more than the copy itself."""
        bufs = self._buffers.get(name)
        if bufs is None or [(b.shape, b.dtype, b.device) for b in bufs] != [(t.shape, t.dtype, t.device)
                                                                             for t in tensors]:
            bufs = self._buffers[name] = [torch.empty_like(t) for t in tensors]
        torch._foreach_copy_(bufs, tensors)
        return bufs

    def release_buffers(self) -> None:
        """Called once a gate has switched the rule to single-pass GRPO for good."""
        self._buffers.clear()

    def on_rollout(self, metrics: dict[str, float]) -> None:
        pass

    def grpo_step(self, params, optimizer, closure) -> StepStats:
        loss = closure()
        norm, _ = clip_and_step(params, optimizer, self.max_grad_norm, process_group(params))
        return StepStats(loss=float(loss.detach()), grad_norm=norm, backward_passes=1, optimizer_steps=1)

    # Rules with a gate (SFPO, GXPO) checkpoint it, so a restarted stage keeps its window and stays tripped.
    gate: ZGate | None = None

    def state_dict(self) -> dict:
        return {"gate": self.gate.state_dict()} if self.gate is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.gate is not None and "gate" in state:
            self.gate.load_state_dict(state["gate"])


class GRPOStep(_Rule):
    """Plain on-policy step: one closure (one backward pass), one optimizer step."""

    def step(self, params, optimizer, closure) -> StepStats:
        return self.grpo_step(params, optimizer, closure)


# --------------------------------------------------------------------------------------------------------- SFPO
class SFPO(_Rule):
    """Slow-Fast Policy Optimization. alpha = 0 means no reposition at all, which is exactly GRPOStep (the K fast
    steps could not move the slow weights), so it runs as GRPOStep: the same parameters bit for bit, 1 pass."""

    def __init__(self, K: int, alpha: float, window: int = 30, tau: float = 1.0, max_grad_norm: float | None = 1.0):
        super().__init__(max_grad_norm)
        if K < 1:
            raise ValueError(f"SFPO needs K >= 1, got {K}")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        self.K, self.alpha = K, alpha
        self.gate = ZGate(window, tau, warmup=window, inclusive=True)  # the paper's trigger is z >= tau
        self._pending = GateResult(None, False)

    def on_rollout(self, metrics: dict[str, float]) -> None:
        if "entropy" in metrics:
            self._pending = self.gate.update(float(metrics["entropy"]))

    def step(self, params, optimizer, closure) -> StepStats:
        gate, self._pending = self._pending, GateResult(None, False)
        if self.gate.tripped or self.alpha == 0.0:  # the trigger applies from the step at which it fires
            self.release_buffers()
            stats = self.grpo_step(params, optimizer, closure)
            stats.alpha, stats.z, stats.gate_tripped = 0.0, gate.z, gate.tripped_now
            return stats
        group = process_group(params)
        loss = float(closure().detach())  # fast step 1; gradients tell which parameters take part
        active = _with_grad(params)
        with torch.no_grad():
            theta0 = self.snapshot("theta0", [local(p).detach() for p in active])  # the only extra copy: 1x
        norm, _ = clip_and_step(params, optimizer, self.max_grad_norm, group)
        for _ in range(self.K - 1):
            closure()
            clip_and_step(params, optimizer, self.max_grad_norm, group)
        with torch.no_grad():  # theta <- theta0 + alpha (thetaK - theta0) == lerp(thetaK, theta0, 1 - alpha)
            torch._foreach_lerp_([local(p) for p in active], theta0, 1.0 - self.alpha)
        closure()  # slow step at the repositioned point
        clip_and_step(params, optimizer, self.max_grad_norm, group)
        return StepStats(loss=loss, grad_norm=norm, backward_passes=self.K + 1, optimizer_steps=self.K + 1,
                         alpha=self.alpha, z=gate.z)


# --------------------------------------------------------------------------------------------------------- GXPO
def geometric_scale(r: Tensor, K: int, out: Tensor | None = None, q: Tensor | None = None) -> Tensor:
    """s(r) = (1 - r^K) / (1 - r^2) = sum_{j<K} r^j / (1 + r), evaluated without cancellation and without powers.
    `r` is used as scratch space (overwritten) when K is odd; `out` and `q` are optional workspaces.

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
    for _ in range(iterations):
        torch.addcmul(_ONE, s, q, out=s)  # s <- 1 + s * q
    return s


_ONE = torch.ones(())


class GXPO(_Rule):
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

    def __init__(self, K: int, alpha: float, eps: float = 1e-8, window: int = 20, warmup: int = 10,
                 tau: float = 2.0, ratio_source: str = "grad", clamp: str = "s", clamp_min: float | None = None,
                 clamp_max: float | None = None, max_grad_norm: float | None = 1.0):
        super().__init__(max_grad_norm)
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
        self.gate = ZGate(window, tau, warmup=warmup, inclusive=False)  # the paper's gate is z > tau

    def step(self, params, optimizer, closure) -> StepStats:
        if self.gate.tripped or self.alpha == 0.0:
            self.release_buffers()
            stats = self.grpo_step(params, optimizer, closure)
            stats.alpha = 0.0
            return stats
        if any(g.get("maximize", False) for g in optimizer.param_groups):
            raise ValueError("GXPO needs optimizer.step() to leave .grad untouched; maximize=True modifies it")
        group = process_group(params)

        loss = float(closure().detach())  # probe 1 at theta0
        active = _with_grad(params)
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
        # A batch without learning signal (every group's rewards equal, no KL) has a zero gradient everywhere; its
        # norm says nothing about stability and would drag the window's mean to 0, so the gate does not see it.
        gate = self.gate.update(norm_c) if norm_c > 0 else GateResult(None, False)
        diag["gxpo_cos_g0_gcorr"] = float(dot) / (norm0 * norm_c) if norm0 > 0 and norm_c > 0 else float("nan")
        diag["gxpo_gcorr_norm"] = norm_c
        return StepStats(loss=loss, grad_norm=norm0, backward_passes=3, optimizer_steps=3, alpha=self.alpha,
                         z=gate.z, gate_tripped=gate.tripped_now, diagnostics=diag)

    def _extrapolate(self, theta: list[Tensor], g1: list[Tensor], g0: list[Tensor], theta0: list[Tensor],
                     d0: list[Tensor] | None, coef1: float, group) -> dict[str, float]:
        """Reposition `theta` (holding theta2) in place to theta0 + alpha * s * (theta2 - theta0); return the
        diagnostics. `g1` holds the clipped second gradient (clip coefficient coef1).

        Works chunk by chunk and repositions each chunk while its s is still in cache: s is never written to
        memory, so the extrapolation reads theta2, theta0, g0 and g1 once and writes theta once."""
        s_sum = torch.zeros((), dtype=torch.float64)
        active_count = torch.zeros((), dtype=torch.float64)
        total = 0
        samples: list[Tensor] = []
        work = None
        for i, (th, a, b, t0) in enumerate(zip(theta, g0, g1, theta0)):
            n = th.numel()
            total += n
            stride = max(1, n // 256)  # a few hundred ratios per tensor for the quantile diagnostics
            th, a, b, t0 = th.view(-1), a.view(-1), b.view(-1), t0.view(-1)
            dd = d0[i].view(-1) if d0 is not None else None
            if work is None or work[0].dtype != th.dtype or work[0].device != th.device:
                work = [torch.empty(min(CHUNK, max(t.numel() for t in theta)), dtype=th.dtype, device=th.device)
                        for _ in range(4)]
            for start in range(0, n, CHUNK):
                sl = slice(start, min(start + CHUNK, n))
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
                torch.mul(num, act, out=r).div_(torch.sub(_ONE, act, out=s).add_(den))
                if dd is None and coef1 != 1.0:
                    r.mul_(1.0 / coef1)
                if self.clamp == "r":
                    r.clamp_(self.clamp_min, self.clamp_max)
                first = (-start) % stride  # sample every stride-th coordinate of the whole tensor
                samples.append(r[first::stride][act[first::stride] > 0])
                active_count += float(act.sum())
                s = geometric_scale(r, self.K, out=s, q=q)
                if self.clamp == "s":
                    s.clamp_(self.clamp_min, self.clamp_max)
                elif self.clamp == "none":
                    torch.nan_to_num_(s, nan=1.0, posinf=1.0, neginf=1.0)
                s_sum += float(s.sum())
                # theta <- theta0 + alpha * s * (theta2 - theta0) = lerp(theta0, theta2, alpha * s), while s is in cache
                torch.lerp(t0[sl], th[sl], s.mul_(self.alpha), out=th[sl])
        sums = all_reduce_sum(torch.stack([s_sum, active_count, torch.tensor(float(total), dtype=torch.float64)]),
                              group)
        sample = torch.cat(samples) if samples else torch.zeros(0)
        if sample.numel() > QUANTILE_SAMPLE:
            sample = sample[torch.linspace(0, sample.numel() - 1, QUANTILE_SAMPLE).long()]
        if group is not None:
            gathered: list = [None] * dist.get_world_size(group)
            dist.all_gather_object(gathered, sample, group=group)
            sample = torch.cat(gathered)
        q = (torch.quantile(sample.double(), torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)).tolist()
             if sample.numel() else [math.nan] * 3)
        return {"gxpo_ratio_p10": q[0], "gxpo_ratio_p50": q[1], "gxpo_ratio_p90": q[2],
                "gxpo_scale_mean": float(sums[0] / sums[2]), "gxpo_inactive_frac": float(1.0 - sums[1] / sums[2])}


def make_update_rule(rl_cfg) -> _Rule:
    if rl_cfg.update == "grpo":
        return GRPOStep(max_grad_norm=rl_cfg.max_grad_norm)
    if rl_cfg.update == "sfpo":
        c = rl_cfg.sfpo
        return SFPO(c.K, c.alpha, window=c.window, tau=c.tau, max_grad_norm=rl_cfg.max_grad_norm)
    if rl_cfg.update == "gxpo":
        c = rl_cfg.gxpo
        return GXPO(c.K, c.alpha, eps=c.eps, window=c.window, warmup=c.warmup, tau=c.tau,
                    ratio_source=c.ratio_source, clamp=c.clamp, clamp_min=c.clamp_min, clamp_max=c.clamp_max,
                    max_grad_norm=rl_cfg.max_grad_norm)
    raise ValueError(f"unknown update rule {rl_cfg.update!r}")
