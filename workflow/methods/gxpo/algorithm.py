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
        """The chunk's pieces of tensors given as their flat views, in order (a whole tensor as itself: a view
        costs the host a dispatch, and a GPU step waits on the host)."""
        return [flat[i] if lo == 0 and hi == flat[i].numel() else flat[i][lo:hi] for i, lo, hi in self.pieces]

    @property
    def sizes(self) -> list[int]:
        return [hi - lo for _, lo, hi in self.pieces]

    def runs(self, flat: Tensor | None, tensors: list[Tensor]) -> tuple[Tensor | None, list[Tensor]]:
        """A snapshot's part of the chunk: as one contiguous run where it has one (a chunk of one piece, or a
        snapshot in one flat buffer; None otherwise), and as the chunk's pieces (what a foreach op pairs with the
        pieces of the parameters)."""
        if flat is not None:
            run = flat[self.offset:self.offset + self.size]
            return run, (list(run.split(self.sizes)) if len(self.pieces) > 1 else [run])
        pieces = self.slices(tensors)
        return (pieces[0] if len(pieces) == 1 else None), pieces


def chunk_plan(sizes: list[int], chunk: int, packed: bool, device: torch.device) -> tuple[Chunk, ...]:
    """Chunks of at most `chunk` elements over tensors of `sizes`: a tensor of a chunk or more is worked in chunks
    of its own; the rest (small tensors, the tails of big ones) are packed together when `packed` (all of one dtype
    and device), each alone otherwise. Each tensor's sampled coordinates (every max(1, n // 256)-th, for the
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
        self._plan_key: tuple | None = None  # the tensors' sizes, dtypes, device and packing the chunks are for
        self._chunks: tuple[Chunk, ...] = ()
        self._workspaces: dict[tuple, list[Tensor]] = {}  # per (dtype, device): three chunk-sized buffers and a 1

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

        loss = closure().detach()  # probe 1 at theta0
        active = with_grad(params)
        with torch.no_grad():
            # copied before in-place clipping; flat, so that a chunk of several tensors finds them in one run
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
        # (on the device: the step reads its numbers once, after the update)
        diag["gxpo_cos_g0_gcorr"] = torch.where((norm0 > 0) & (norm_c > 0), dot[0] / (norm0 * norm_c), math.nan)
        diag["gxpo_gcorr_norm"] = norm_c
        return StepStats(loss=loss, grad_norm=norm0, backward_passes=3, optimizer_steps=3, alpha=self.alpha,
                         diagnostics=diag)

    def _plan(self, tensors: list[Tensor]) -> tuple[Chunk, ...]:
        """The chunks of this step's tensors (kept while their sizes, dtypes and device stay). Tensors share chunks
        when they all have one dtype and device: a chunk's work runs as foreach ops over its pieces and in
        workspaces of one dtype, which need that."""
        dev = tensors[0].device if tensors else torch.device("cpu")
        packed = len({(t.dtype, t.device) for t in tensors}) <= 1
        key = (tuple((t.numel(), t.dtype) for t in tensors), dev, packed)
        if self._plan_key != key:
            self._plan_key, self._chunks = key, chunk_plan([t.numel() for t in tensors], chunk_size(dev), packed,
                                                           dev)
        return self._chunks

    def _ratio_floor(self, dtype: torch.dtype) -> float:
        """clamp_min for ratios held in `dtype`, above -1 in that dtype: at r = -1 and an odd K the scale is
        1/(1 + r) = inf and the weights NaN, and the default -1 + 1e-3 rounds to -1 in bfloat16 (then the next
        value above -1 that a bfloat16 holds, -1 + 2^-7). A bound set at -1 or below is the user's."""
        if self.clamp_min != -1.0 + 1e-3 or float(torch.tensor(self.clamp_min, dtype=dtype, device="cpu")) > -1.0:
            return self.clamp_min
        return -1.0 + torch.finfo(dtype).eps

    def _work(self, like: Tensor, n: int) -> list[Tensor]:
        """Three workspaces of `n` elements (the plan's largest chunk) of `like`'s dtype and device, kept between
        steps, and a 0-dim one."""
        key = (like.dtype, like.device)
        work = self._workspaces.get(key)
        if work is None or work[0].numel() < n:
            work = [torch.empty(n, dtype=like.dtype, device=like.device) for _ in range(3)]
            work.append(torch.ones((), dtype=like.dtype, device=like.device))
            self._workspaces[key] = work
        return work

    def release_buffers(self) -> None:
        super().release_buffers()
        self._workspaces = {}

    def _done_with_work(self, dev: torch.device) -> None:
        """Off the CPU, let the workspaces go after each use: kept, they stayed allocated through the next forward
        and backward pass and added to the step's peak (six chunks of 16 MiB, before chunks were worked as lists of
        pieces, added ~0.05x Qwen2-0.5B's parameter bytes: 2.05x on an H200, goal 2). The CUDA caching allocator
        hands the same blocks back at the next use without a device allocation. On the CPU they are kept: fresh
        memory there costs a page fault per page at every first touch."""
        if dev.type != "cpu":
            self._workspaces = {k: w for k, w in self._workspaces.items() if k[1] != dev}

    def _dot_g0(self, grads: list[Tensor], g0: list[Tensor]) -> Tensor:
        """<g0, grads> in float64 on the device: a dot per chunk, summed once at the end."""
        dev = grads[0].device if grads else torch.device("cpu")
        flat = self.flat_buffer("g0")
        plan = self._plan(grads)
        largest = max((c.size for c in plan), default=0)
        grads = [t.view(-1) for t in grads]
        g0 = [t.view(-1) for t in g0] if flat is None else g0  # (a chunk takes the flat buffer's run otherwise)
        dots = []
        for c in plan:
            pieces = c.slices(grads)
            run0, pieces0 = c.runs(flat, g0)
            if len(pieces) > 1:  # several tensors: gathered into workspaces (g0 already lies in one run when flat)
                work = self._work(pieces[0], largest)
                run = torch.cat(pieces, out=work[0][:c.size])
                if run0 is None:
                    run0 = torch.cat(pieces0, out=work[1][:c.size])
            else:
                run = pieces[0]
            dots.append(torch.dot(run0, run))
        self._done_with_work(dev)
        return (torch.stack(dots).sum(dtype=torch.float64) if dots
                else torch.zeros((), dtype=torch.float64, device=dev))

    def _extrapolate(self, theta: list[Tensor], g1: list[Tensor], g0: list[Tensor], theta0: list[Tensor],
                     d0: list[Tensor] | None, coef1: Tensor | float, group) -> dict[str, Tensor]:
        """Reposition `theta` (holding theta2) in place to theta0 + alpha * s * (theta2 - theta0); return the
        diagnostics. `g1` holds the clipped second gradient (clip coefficient coef1). theta0's buffers are
        overwritten (the snapshot is taken afresh each step).

        Works chunk by chunk over the tensors taken as one flat run (`chunk_plan`): per chunk, the ratio r and the
        scale s in three chunk-sized workspaces, and the reposition. The ops that meet the tensors themselves are
        foreach ops over the chunk's pieces (or one torch.cat gathering them), the rest run on the workspaces whole,
        so a chunk costs the same ~20 ops whether it holds one tensor's part or a hundred small tensors: the ops per
        step follow the chunk count, i.e. the parameter count over the chunk size, not the tensor count (a GPU step
        is launch-bound; a GPU's chunks are large: `sharded.GPU_CHUNK`)."""
        # Everything below stays on the parameters' device, the diagnostics included: the sums accumulate there, and
        # the quantile sample keeps its size (the inactive coordinates' ratios as NaN, which nanquantile skips): an
        # op whose output's size depends on the data would make the host wait for the device. The step reads them
        # with its other numbers, once, after the update (StepStats.read).
        dev = theta[0].device if theta else torch.device("cpu")
        # the unclipped g1 is the clipped one over the clip coefficient (a device scalar: dividing by it when it is
        # exactly 1 changes nothing, and asking whether it is 1 would be a read)
        unclip = coef1 if d0 is None and isinstance(coef1, Tensor) else None
        total = sum(t.numel() for t in theta)
        samples: list[Tensor] = []
        sampled_act: list[Tensor] = []  # act at the sampled coordinates (1 active, 0 not)
        scale_sums: list[Tensor] = []  # per chunk, float64: the sum of s
        active_counts: list[Tensor] = []  # per chunk, float64: the coordinates on the active set
        flat_g0, flat_t0 = self.flat_buffer("g0"), self.flat_buffer("theta0")
        flat_d0 = self.flat_buffer("d0") if d0 is not None else None
        # each tensor's flat view once (a chunk takes a slice of it; of a flat snapshot, a chunk takes its run)
        theta, g1 = [t.view(-1) for t in theta], [t.view(-1) for t in g1]
        g0, theta0, d0 = ([t.view(-1) for t in ts] if ts is not None and flat is None else ts
                          for ts, flat in ((g0, flat_g0), (theta0, flat_t0), (d0, flat_d0)))
        plan = self._plan(theta)
        largest = max((c.size for c in plan), default=0)
        for c in plan:
            n, several = c.size, len(c.pieces) > 1
            *work, one = self._work(theta[c.pieces[0][0]], largest)
            act, r, s = (w[:n] for w in work)
            th, b = c.slices(theta), c.slices(g1)
            _, t0 = c.runs(flat_t0, theta0)
            den_run, den = c.runs(flat_g0, g0) if d0 is None else c.runs(flat_d0, d0)
            # the workspaces cut as the pieces are, for the foreach ops that pair them with the pieces
            r_pieces, s_pieces = ([r], [s]) if not several else (list(r.split(c.sizes)), list(s.split(c.sizes)))
            if d0 is None:  # r = g1 / g0 on |g0| > eps; g1 unclipped = clipped g1 / clip coefficient
                num = torch.cat(b, out=r) if several else b[0]
            else:  # r = (theta2 - theta1) / (theta1 - theta0), with theta1 - theta0 = d0
                if several:
                    torch.cat(th, out=r)
                    torch._foreach_sub_(r_pieces, t0)
                else:
                    torch.sub(th[0], t0[0], out=r)
                torch._foreach_sub_(r_pieces, den)
                num = r
            # Off the active set r = 0, which gives s = 1 exactly (keep the observed displacement). Float masks, not
            # boolean ones: on CPU, comparisons into bool tensors and masked_fill are several times slower than
            # arithmetic. (1 - act) + den is den itself, exactly, on the active set, and never 0 off it.
            torch.abs(den_run if den_run is not None else torch.cat(den, out=act), out=act).gt_(self.eps)
            torch.sub(one, act, out=s)
            torch._foreach_add_(s_pieces, den)
            torch.mul(num, act, out=r).div_(s)
            if unclip is not None:
                r.div_(unclip)
            if self.clamp == "r":
                r.clamp_(self._ratio_floor(r.dtype), self.clamp_max)
            # a few hundred ratios per tensor for the quantile diagnostics (copied: r and act are scratch below)
            if c.sample is None:
                first, stride = c.sample_slice
                samples.append(r[first::stride].clone())
                sampled_act.append(act[first::stride].clone())
            else:
                samples.append(r.index_select(0, c.sample))
                sampled_act.append(act.index_select(0, c.sample))
            active_counts.append(act.sum(dtype=torch.float64))
            s = geometric_scale(r, self.K, out=s, q=act, one=one)  # act is free: its count and sample are taken
            if self.clamp == "s":
                s.clamp_(self.clamp_min, self.clamp_max)
            elif self.clamp == "none":
                torch.nan_to_num_(s, nan=1.0, posinf=1.0, neginf=1.0)
            scale_sums.append(s.sum(dtype=torch.float64))
            # theta <- theta0 + alpha * s * (theta2 - theta0) = lerp(theta0, theta2, alpha * s)
            s.mul_(self.alpha)
            if several:  # into theta0's pieces, then copied into the tensors (a foreach op has no out=)
                torch._foreach_lerp_(t0, th, s_pieces)
                torch._foreach_copy_(th, t0)
            else:
                torch.lerp(t0[0], th[0], s, out=th[0])
        self._done_with_work(dev)
        per_chunk = (torch.stack(scale_sums + active_counts).view(2, -1) if plan
                     else torch.zeros(2, 1, dtype=torch.float64, device=dev))
        sums = all_reduce_sum(torch.cat([per_chunk.sum(1),
                                         torch.tensor([float(total)], dtype=torch.float64, device=dev)]), group)
        sample = (torch.where(torch.cat(sampled_act) > 0, torch.cat(samples), math.nan) if samples
                  else torch.zeros(0, dtype=torch.float64, device=dev))
        if sample.numel() > QUANTILE_SAMPLE:
            sample = sample[torch.linspace(0, sample.numel() - 1, QUANTILE_SAMPLE, device=sample.device).long()]
        if group is not None:
            # every rank's sample padded (NaN) to one size, so that a tensor all-gather takes them (NCCL's, on the
            # device; gloo's on the CPU chain) and no rank waits for a size
            sample = torch.cat([sample, sample.new_full((QUANTILE_SAMPLE - sample.numel(),), math.nan)])
            gathered = [torch.empty_like(sample) for _ in range(dist.get_world_size(group))]
            dist.all_gather(gathered, sample, group=group)
            sample = torch.cat(gathered)
        q = (torch.nanquantile(sample.double(), torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64, device=dev))
             if sample.numel() else torch.full((3,), math.nan, dtype=torch.float64, device=dev))
        return {"gxpo_ratio_p10": q[0], "gxpo_ratio_p50": q[1], "gxpo_ratio_p90": q[2],
                "gxpo_scale_mean": sums[0] / sums[2], "gxpo_inactive_frac": 1.0 - sums[1] / sums[2]}
