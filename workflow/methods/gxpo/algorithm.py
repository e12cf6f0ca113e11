"""Gradient Extrapolation Policy Optimization: 2 probes, a per-coordinate retention ratio r, the geometric scale
s = (1 - r^K) / (1 - r^2), reposition theta0 + alpha s (theta2 - theta0), 1 corrective step: 3 backward passes for
any K. Its gate (z > tau of the corrective-gradient norm against a window of past norms) switches it to plain GRPO
for good."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from workflow.algos.gates import ZGate
from workflow.algos.rule import MultiPassRule, StepStats
from workflow.algos.sharded import all_reduce_sum, chunk_size, clip_and_step, local, process_group, with_grad

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


@dataclass(frozen=True)
class Chunk:
    """One chunk of the extrapolation's elementwise work: consecutive pieces of the tensors taken as one flat run."""

    pieces: tuple[tuple[int, int, int], ...]  # (tensor index, start, stop) in the tensor's flat view
    offset: int  # where the chunk starts in the flat run (the flat snapshots' coordinates)
    size: int
    sample_slice: tuple[int, int] | None  # one piece: its sampled coordinates are [first::stride] of the chunk
    sample: Tensor | None  # several pieces: the chunk positions of their sampled coordinates (on the device)

    def slices(self, flat: list[Tensor]) -> list[Tensor]:
        """The chunk's pieces of tensors given as their flat views, in order."""
        return [flat[i][lo:hi] for i, lo, hi in self.pieces]


def chunk_plan(sizes: list[int], chunk: int, packed: bool, device: torch.device) -> tuple[Chunk, ...]:
    """Chunks of at most `chunk` elements over tensors of `sizes`: a tensor of a chunk or more is worked in chunks
    of its own; the rest (small tensors, the tails of big ones) are packed together when `packed` (their copies lie
    in flat snapshots), each alone otherwise. Each tensor's sampled coordinates (every max(1, n // 256)-th, for the
    ratio quantiles) are the same whatever the packing."""
    strides = [max(1, n // 256) for n in sizes]
    out: list[Chunk] = []
    pending: list[tuple[int, int, int]] = []
    offset = 0

    def emit(pieces: list[tuple[int, int, int]]) -> None:
        nonlocal offset
        size = sum(hi - lo for _, lo, hi in pieces)
        if len(pieces) == 1:
            i, lo, _ = pieces[0]
            out.append(Chunk(tuple(pieces), offset, size, ((-lo) % strides[i], strides[i]), None))
        else:
            positions, at = [], 0
            for i, lo, hi in pieces:
                positions.extend(range(at + (-lo) % strides[i], at + hi - lo, strides[i]))
                at += hi - lo
            out.append(Chunk(tuple(pieces), offset, size, None, torch.tensor(positions, dtype=torch.long,
                                                                             device=device)))
        offset += size

    held = 0  # elements in `pending`

    def flush() -> None:
        nonlocal held
        if pending:
            emit(list(pending))
            pending.clear()
        held = 0

    for i, n in enumerate(sizes):
        lo = 0
        if n >= chunk:  # its whole chunks: views of it
            flush()
            while n - lo >= chunk:
                emit([(i, lo, lo + chunk)])
                lo += chunk
        if lo < n:  # a small tensor, or a big one's tail
            if held + n - lo > chunk or not packed:
                flush()
            pending.append((i, lo, n))
            held += n - lo
            if not packed:
                flush()
    flush()
    return tuple(out)


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
        self._plan_key: tuple | None = None  # the tensors' sizes, device and packing the chunks below are for
        self._chunks: tuple[Chunk, ...] = ()
        self._workspaces: dict[tuple, list[Tensor]] = {}  # per (dtype, device): six chunk-sized buffers and a 1

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
            # copied before in-place clipping; flat, so that small tensors' work runs together (chunk_plan)
            g0 = self.snapshot("g0", [local(p.grad).detach() for p in active], flat=True)
            theta0 = self.snapshot("theta0", [local(p).detach() for p in active], flat=True)
        norm0, _ = clip_and_step(params, optimizer, self.max_grad_norm, group)
        d0 = None
        if self.ratio_source == "displacement":
            with torch.no_grad():
                d0 = self.snapshot("d0", [local(p).detach() for p in active], flat=True)
                torch._foreach_sub_(d0, theta0)  # theta1 - theta0

        closure()  # probe 2 at theta1
        _, coef1 = clip_and_step(params, optimizer, self.max_grad_norm, group)

        with torch.no_grad():  # s per coordinate and theta <- theta0 + alpha * s * (theta2 - theta0), in place
            diag = self._extrapolate([local(p) for p in active], [local(p.grad) for p in active], g0, theta0, d0,
                                     coef1, group)

        closure()  # corrective gradient at the repositioned point
        with torch.no_grad():
            dot = all_reduce_sum(self._dot_g0([local(p.grad) for p in active], g0).reshape(1), group)
        norm_c, _ = clip_and_step(params, optimizer, self.max_grad_norm, group)
        diag["gxpo_cos_g0_gcorr"] = float(dot) / (norm0 * norm_c) if norm0 > 0 and norm_c > 0 else float("nan")
        diag["gxpo_gcorr_norm"] = norm_c
        return StepStats(loss=loss, grad_norm=norm0, backward_passes=3, optimizer_steps=3, alpha=self.alpha,
                         diagnostics=diag)

    def _plan(self, tensors: list[Tensor]) -> tuple[Chunk, ...]:
        """The chunks of this step's tensors (kept while their sizes and device stay; packed when g0 and theta0 lie
        in flat snapshots, and d0 too for the displacement ratio)."""
        packed = self.flat_buffer("g0") is not None and self.flat_buffer("theta0") is not None and (
            self.ratio_source != "displacement" or self.flat_buffer("d0") is not None)
        dev = tensors[0].device if tensors else torch.device("cpu")
        key = (tuple(t.numel() for t in tensors), dev, packed)
        if self._plan_key != key:
            self._plan_key, self._chunks = key, chunk_plan(list(key[0]), chunk_size(dev), packed, dev)
        return self._chunks

    def _work(self, like: Tensor, n: int) -> list[Tensor]:
        """Six workspaces of `n` elements (the plan's largest chunk) of `like`'s dtype and device, kept between
        steps, and a 0-dim one."""
        key = (like.dtype, like.device)
        work = self._workspaces.get(key)
        if work is None or work[0].numel() < n:
            work = [torch.empty(n, dtype=like.dtype, device=like.device) for _ in range(6)]
            work.append(torch.ones((), dtype=like.dtype, device=like.device))
            self._workspaces[key] = work
        return work

    def release_buffers(self) -> None:
        super().release_buffers()
        self._workspaces = {}

    def _done_with_work(self, dev: torch.device) -> None:
        """Off the CPU, let the workspaces go after each use: kept, their six chunks (6 x 16 MiB at a GPU's 4M
        elements) stayed allocated through the next forward and backward pass and added ~0.05x Qwen2-0.5B's
        parameter bytes to the step's peak (2.05x on an H200, goal 2). The CUDA caching allocator hands the same
        blocks back at the next use without a device allocation. On the CPU they are kept: fresh memory there costs
        a page fault per page at every first touch."""
        if dev.type != "cpu":
            self._workspaces = {k: w for k, w in self._workspaces.items() if k[1] != dev}

    def _dot_g0(self, grads: list[Tensor], g0: list[Tensor]) -> Tensor:
        """<g0, grads> accumulated in float64 on the device, chunk by chunk as the extrapolation went."""
        total = torch.zeros((), dtype=torch.float64, device=grads[0].device if grads else "cpu")
        flat = self.flat_buffer("g0")
        plan = self._plan(grads)
        largest = max((c.size for c in plan), default=0)
        grads, g0 = [t.view(-1) for t in grads], [t.view(-1) for t in g0]
        for c in plan:
            if len(c.pieces) == 1:
                i, lo, hi = c.pieces[0]
                total += torch.dot(g0[i][lo:hi], grads[i][lo:hi]).double()
            else:
                gathered = torch.cat(c.slices(grads), out=self._work(grads[c.pieces[0][0]], largest)[0][:c.size])
                total += torch.dot(flat[c.offset:c.offset + c.size], gathered).double()
        self._done_with_work(total.device)
        return total

    def _extrapolate(self, theta: list[Tensor], g1: list[Tensor], g0: list[Tensor], theta0: list[Tensor],
                     d0: list[Tensor] | None, coef1: float, group) -> dict[str, float]:
        """Reposition `theta` (holding theta2) in place to theta0 + alpha * s * (theta2 - theta0); return the
        diagnostics. `g1` holds the clipped second gradient (clip coefficient coef1).

        Works chunk by chunk over the tensors taken as one flat run (`chunk_plan`) and repositions each chunk while
        its s is still in cache: s is never written to memory, so the extrapolation reads theta2, theta0, g0 and g1
        once and writes theta once. A chunk inside one tensor works on views of it; a chunk of several tensors (the
        small ones: norms, biases, tails) gathers theta2 and g1 into workspaces and scatters the new theta back, so
        the number of ops per step follows the parameter count, not the tensor count (a GPU step is launch-bound)."""
        # Everything below stays on the parameters' device: the sums accumulate there (no host sync per chunk) and
        # the quantile sample is masked once at the end, so a GPU step waits for the host only for its diagnostics.
        dev = theta[0].device if theta else torch.device("cpu")
        s_sum = torch.zeros((), dtype=torch.float64, device=dev)
        active_count = torch.zeros((), dtype=torch.float64, device=dev)
        total = sum(t.numel() for t in theta)
        samples: list[Tensor] = []
        sampled_active: list[Tensor] = []
        flat_g0, flat_t0 = self.flat_buffer("g0"), self.flat_buffer("theta0")
        flat_d0 = self.flat_buffer("d0") if d0 is not None else None
        # each tensor's flat view once (a chunk takes a slice of it)
        theta, g1, g0, theta0 = ([t.view(-1) for t in ts] for ts in (theta, g1, g0, theta0))
        d0 = [t.view(-1) for t in d0] if d0 is not None else None
        plan = self._plan(theta)
        largest = max((c.size for c in plan), default=0)
        for c in plan:
            n = c.size
            *work, one = self._work(theta[c.pieces[0][0]], largest)
            act, r, q, s, th_ws, b_ws = (w[:n] for w in work)
            if len(c.pieces) == 1:  # inside one tensor: views
                i, lo, hi = c.pieces[0]
                th, b, a, t0 = theta[i][lo:hi], g1[i][lo:hi], g0[i][lo:hi], theta0[i][lo:hi]
                dd = d0[i][lo:hi] if d0 is not None else None
            else:  # several tensors: gathered (g0, theta0 and d0 are contiguous in their flat snapshots)
                th, b = torch.cat(c.slices(theta), out=th_ws), torch.cat(c.slices(g1), out=b_ws)
                a, t0 = flat_g0[c.offset:c.offset + n], flat_t0[c.offset:c.offset + n]
                dd = flat_d0[c.offset:c.offset + n] if d0 is not None else None
            if dd is None:  # r = g1 / g0 on |g0| > eps; g1 unclipped = clipped g1 / clip coefficient
                den, num = a, b
            else:  # r = (theta2 - theta1) / (theta1 - theta0), with theta1 - theta0 = d0
                den = dd
                num = torch.sub(th, t0, out=q).sub_(den)
            # Off the active set r = 0, which gives s = 1 exactly (keep the observed displacement). Float masks, not
            # boolean ones: on CPU, comparisons into bool tensors and masked_fill are several times slower than
            # arithmetic. (1 - act) + den is den itself, exactly, on the active set, and never 0 off it.
            torch.abs(den, out=act).gt_(self.eps)
            torch.mul(num, act, out=r).div_(torch.sub(one, act, out=s).add_(den))
            if dd is None and coef1 != 1.0:
                r.mul_(1.0 / coef1)
            if self.clamp == "r":
                r.clamp_(self.clamp_min, self.clamp_max)
            # a few hundred ratios per tensor for the quantile diagnostics (copied: r is scratch below)
            if c.sample is None:
                first, stride = c.sample_slice
                samples.append(r[first::stride].clone())
                sampled_active.append(act[first::stride] > 0)
            else:
                samples.append(r.index_select(0, c.sample))
                sampled_active.append(act.index_select(0, c.sample) > 0)
            active_count += act.sum(dtype=torch.float64)
            s = geometric_scale(r, self.K, out=s, q=q, one=one)
            if self.clamp == "s":
                s.clamp_(self.clamp_min, self.clamp_max)
            elif self.clamp == "none":
                torch.nan_to_num_(s, nan=1.0, posinf=1.0, neginf=1.0)
            s_sum += s.sum(dtype=torch.float64)
            # theta <- theta0 + alpha * s * (theta2 - theta0) = lerp(theta0, theta2, alpha * s), while s is in cache
            torch.lerp(t0, th, s.mul_(self.alpha), out=th)
            if len(c.pieces) > 1:  # back into the tensors: one kernel for all of them
                torch._foreach_copy_(c.slices(theta),
                                     list(th.split([hi - lo for _, lo, hi in c.pieces])))
        self._done_with_work(dev)
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


