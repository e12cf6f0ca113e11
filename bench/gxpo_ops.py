#!/usr/bin/env python3
"""How many ATen ops one GXPO step's own arithmetic dispatches (snapshots, extrapolation, the corrective dot;
not the backward passes, the gradient clipping or the optimizer, which GRPO's step has too), at a real model's
tensor list. On a GPU each op is at least one kernel
launch, and a step there is launch-bound (docs/gpu-check.md: GXPO 1.29-1.39x GRPO per pass on an H200): this count is
what issue 64 cuts (small tensors packed into shared chunks; then each chunk's work done by foreach ops over its pieces,
so a chunk's op count no longer depends on how many tensors it holds and a GPU's chunks could grow to 16M elements),
measured without a GPU.

    python bench/gxpo_ops.py [--shape qwen2-0.5b] [--chunk gpu|cpu] [--dtype bfloat16]
    python bench/gxpo_ops.py --whole [--shape qwen2-0.5b]    # whole steps: GXPO's ops per pass over GRPO's
    PYTHONPATH=<another checkout> python bench/gxpo_ops.py     # the same count for that checkout's GXPO

--whole counts whole steps instead (issue 83, item 2: per pass, GXPO's ops within 1.2x GRPO's): a Qwen2 of the
shape in bf16 on the CPU, the local engine's real closure (forward and backward over one micro-batch of 1 x 16
tokens under bf16 autocast: an op count does not depend on the batch), the clipping and a fused AdamW step, one GRPO
step and one GXPO step (3 passes), every computing op counted. On a GPU each such op is at least one kernel launch
(a foreach op over many tensors a few).

The tensors have the shape's parameter sizes (bf16 by default, to halve the memory: the op count does not depend
on the dtype) and live on the CPU; `--chunk gpu` plans chunks as on a GPU (workflow/algos/sharded.GPU_CHUNK).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(1, str(Path(__file__).resolve().parent))  # (after PYTHONPATH: the checkout measured)
from update_rules import SHAPES  # noqa: E402

import workflow.algos.sharded as sharded  # noqa: E402
from workflow.methods.gxpo.algorithm import GXPO  # noqa: E402

class CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: collections.Counter = collections.Counter()  # ops that compute (a kernel each on a GPU)
        self.views: collections.Counter = collections.Counter()  # views, slices: metadata, no kernel
        self.paused = False

    def uncounted(self, fn):
        """`fn` with the count paused while it runs."""
        def run(*args, **kwargs):
            self.paused = True
            try:
                return fn(*args, **kwargs)
            finally:
                self.paused = False
        return run

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.paused:
            (self.views if func.is_view else self.ops)[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def shape_sizes(shape: str) -> list[tuple[int, ...]]:
    """The parameter shapes of a Qwen2 of this config (built on the meta device: no memory)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    with torch.device("meta"):
        model = Qwen2ForCausalLM(Qwen2Config(**SHAPES[shape]))
    return [tuple(p.shape) for p in model.parameters()]


def whole_steps(shape: str) -> None:
    """Ops that compute in one whole GRPO step and one whole GXPO step (K = 5) of a real model, per backward pass."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from update_rules import real_closure

    from workflow.methods.grpo.algorithm import GRPOStep
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**SHAPES[shape], max_position_embeddings=128)).to(torch.bfloat16)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6, fused=True)
    closure = real_closure(model, opt, SHAPES[shape]["vocab_size"], 1, 16, torch.device("cpu"))
    per_pass = {}
    for name, rule in (("grpo", GRPOStep()), ("gxpo", GXPO(K=5, alpha=0.5))):
        rule.step(params, opt, closure)  # warm-up: AdamW's state, the rule's buffers and plan
        counter = CountOps()
        with counter:
            stats = rule.step(params, opt, closure)
        total = sum(counter.ops.values())
        per_pass[name] = total / stats.backward_passes
        top = ", ".join(f"{k} {v}" for k, v in counter.ops.most_common(5))
        print(f"{name}: {total:,} ops that compute in a step of {stats.backward_passes} pass(es), "
              f"{per_pass[name]:,.0f} a pass ({top})")
    print(f"{shape}: {len(params)} tensors, chunks of {sharded.chunk_size(torch.device('cpu')):,}; GXPO's ops per "
          f"pass = {per_pass['gxpo'] / per_pass['grpo']:.3f}x GRPO's (goal <= 1.2x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2-0.5b")
    ap.add_argument("--chunk", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--time", type=int, default=0, metavar="N",
                    help="also the median wall time of N whole steps, not counting (compare two checkouts in one "
                         "sitting, alternating)")
    ap.add_argument("--whole", action="store_true", help="count whole GRPO and GXPO steps of a real model instead")
    a = ap.parse_args()
    chunk = sharded.GPU_CHUNK if a.chunk == "gpu" else sharded.CHUNK
    sharded.chunk_size = lambda device: chunk  # the plan a GPU would make, on this CPU
    import workflow.methods.gxpo.algorithm as gxpo
    gxpo.chunk_size = sharded.chunk_size
    if a.whole:
        whole_steps(a.shape)
        return
    dtype = getattr(torch, a.dtype)
    shapes = shape_sizes(a.shape)
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=g, dtype=torch.float32).to(dtype)) for s in shapes]
    opt = torch.optim.SGD(params, lr=1e-3)
    counter = CountOps()

    def closure() -> torch.Tensor:  # our stand-in for backward: fresh gradients
        with torch.no_grad():
            for p in params:
                p.grad = p * 1e-2
            return torch.zeros(())

    # the closure, the optimizer and the clipping (the global norm: every rule's, once per pass) are not counted
    closure = counter.uncounted(closure)
    opt.step = counter.uncounted(opt.step)
    gxpo.clip_and_step = counter.uncounted(gxpo.clip_and_step)
    rule = GXPO(K=5, alpha=0.5, max_grad_norm=None)
    rule.step(params, opt, closure)  # warm-up: buffers, plan
    t0 = time.perf_counter()
    with counter:
        rule.step(params, opt, closure)
    seconds = time.perf_counter() - t0
    steps = []
    for _ in range(a.time):  # (the counter is not active: the dispatch mode's own cost is not in these)
        t0 = time.perf_counter()
        rule.step(params, opt, closure)
        steps.append(time.perf_counter() - t0)
    total, views = sum(counter.ops.values()), sum(counter.views.values())
    top = ", ".join(f"{k} {v}" for k, v in counter.ops.most_common(6))
    print(f"{a.shape}: {len(shapes)} tensors, {sum(p.numel() for p in params) / 1e6:.0f}M parameters, chunks of "
          f"{chunk:,} ({a.chunk}); GXPO's own ops per step: {total:,} that compute ({top}), {views:,} views; "
          f"{seconds:.1f} s on this CPU while counting"
          + (f"; a whole step (closure, clipping, SGD included) {statistics.median(steps):.2f} s, median of {a.time}"
             if steps else ""))


if __name__ == "__main__":
    main()
