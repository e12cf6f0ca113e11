"""Parameter arithmetic that works the same on plain tensors and on FSDP2-sharded ones (DTensor, Shard(0)).

Elementwise work runs on each rank's local shard; the few reductions (norms, counts, dot products) are
all-reduced over the parameters' device mesh, so every rank computes the same scalars and takes the same
decisions.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor
from torch.optim import Optimizer

try:  # DTensor is public from torch 2.4 on
    from torch.distributed.tensor import DTensor
except ImportError:  # pragma: no cover
    DTensor = ()  # type: ignore[assignment,misc]

# Elementwise work on huge tensors runs in chunks of this many elements, so temporaries stay cache-sized and the
# extra peak memory stays at the documented number of parameter copies.
CHUNK = 1 << 18
# On a GPU each op on a chunk costs a kernel launch and its dispatch (~10 us of CPU): cache-sized chunks of a 0.5B
# model made GXPO's step ~68k launches, 3x a GRPO pass on an H200 (bench/update_rules.py --device cuda), and 4M-element
# ones still ~4.2k ops (bench/gxpo_ops.py). Chunks of 16M elements there: Qwen2-0.5B's 494M parameters make 33 chunks
# (~700 ops a step). GXPO's temporaries, three chunk-sized workspaces and the float64 copy that summing a chunk in
# float64 makes (3 x 64 + 128 MiB for fp32 weights, ~0.17x that model's parameter bytes), live only while it
# extrapolates, between backward passes, with the passes' activations freed; 32M elements would halve the ops again
# for twice the temporaries (unmeasured on a GPU: the memory goal is 2x parameter bytes).
GPU_CHUNK = 1 << 24


def chunk_size(device: torch.device) -> int:
    """How many elements one chunk of elementwise work takes on this device."""
    return CHUNK if device.type == "cpu" else GPU_CHUNK


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
    if not tensors:  # no gradient reached any parameter: no device to follow (a 0 on the CPU)
        return torch.zeros((), dtype=torch.float64, device="cpu")
    norms = torch._foreach_norm([local(t) for t in tensors])
    sq = torch.stack([n.double() ** 2 for n in norms]).sum()
    return all_reduce_sum(sq, group).sqrt()


def clip_and_step(params: list[Tensor], optimizer: Optimizer, max_grad_norm: float | None,
                  group=None) -> tuple[Tensor, Tensor | float]:
    """Clip the global gradient norm in place (if configured), take one optimizer step.

    Returns (pre-clip norm, clip coefficient), both on the device (the coefficient is 1.0 without a max norm): read
    as numbers they would stall a GPU's launch queue, so the rule reads the step's numbers once, after its update
    (StepStats.read). The gradients are multiplied by the coefficient whether or not it binds, as
    torch.nn.utils.clip_grad_norm_ does: deciding would be a read, and a coefficient of exactly 1 changes nothing.
    The coefficient is one scalar for all coordinates, which is what lets GXPO recover the unclipped gradient exactly
    from the clipped one instead of keeping another copy."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = global_norm(grads, group)
    coef: Tensor | float = 1.0
    if max_grad_norm is not None:
        coef = (max_grad_norm / (norm + 1e-6)).clamp(max=1.0)
        if grads:
            torch._foreach_mul_([local(g) for g in grads], coef)
    optimizer.step()
    return norm, coef


def with_grad(params: list[Tensor]) -> list[Tensor]:
    """The parameters the last backward pass reached (the ones an update rule takes part in)."""
    return [p for p in params if p.grad is not None]
