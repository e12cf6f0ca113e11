#!/usr/bin/env python3
"""Cost of SFPO's and GXPO's extra arithmetic and memory, on >= 100M float32 parameters on the CPU.

Time: the reposition / extrapolation arithmetic of one step (SFPO: the lerp; GXPO: the per-coordinate scale s and
the reposition), divided by the time of ONE copy of the parameters measured in the same run (goal <= 4x). The
snapshots themselves (theta0; GXPO also g0) are plain copies into buffers the rules keep between steps.

Memory: each rule takes real steps (SGD, closure that allocates fresh gradients like backward does) in its own
process; its peak resident memory minus the peak of the same run with GRPOStep, in units of parameter bytes
(goal: SFPO <= 1, GXPO <= 2).

    python bench/update_rules.py [--params 100_000_000] [--tensors 25] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from workflow.methods.grpo.algorithm import GRPOStep
from workflow.methods.gxpo.algorithm import GXPO
from workflow.methods.sfpo.algorithm import SFPO


def make_params(n: int, tensors: int, grads: bool = True) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(n // tensors, generator=g)) for _ in range(tensors)]
    if grads:
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g) * 1e-3
    return ps


def timed(fn, repeat: int) -> float:
    fn()  # warm-up: first touches of fresh memory are page faults, not arithmetic
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_arithmetic(n: int, tensors: int, repeat: int) -> dict[str, float]:
    params = make_params(n, tensors)
    copies = [torch.empty_like(p) for p in params]
    data = [p.detach() for p in params]
    out = {"copy": timed(lambda: torch._foreach_copy_(copies, data), repeat)}

    # the rules keep their snapshot buffers from step to step, so a step's cost is copy-into-buffer + arithmetic
    theta0 = [d.clone() for d in data]
    out["sfpo"] = timed(lambda: torch._foreach_lerp_(data, theta0, 0.2), repeat)  # reposition

    g1 = [p.grad for p in params]
    g0 = [g + 1e-3 * torch.randn_like(g) for g in g1]  # correlated probes: ratios spread around 0.5
    torch._foreach_copy_(theta0, data)
    for K in (3, 10):
        gx = GXPO(K=K, alpha=0.5)
        # theta == theta0 before each call, so repeats see the same values (the reposition lands on theta0)
        out[f"gxpo_K{K}"] = timed(lambda: gx._extrapolate(data, g1, g0, theta0, None, 1.0, None), repeat)
    return out


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def extra_peak_of_steps(rule_name: str, n: int, tensors: int, steps: int) -> int:
    """In a fresh process: parameters + gradients allocated (GRPO's own footprint), then the peak resident memory
    (VmHWM, reset just before) of `steps` update-rule steps above that baseline, in bytes."""
    params = make_params(n, tensors, grads=False)
    opt = torch.optim.SGD(params, lr=1e-3)

    def closure():
        with torch.no_grad():
            for p in params:
                p.grad = None
                p.grad = p * 1e-2  # a fresh gradient tensor, as backward would allocate
        return torch.zeros(())

    rule = {"grpo": lambda: GRPOStep(), "sfpo": lambda: SFPO(K=3, alpha=0.8),
            "gxpo": lambda: GXPO(K=5, alpha=0.5),
            "gxpo_displacement": lambda: GXPO(K=5, alpha=0.5, ratio_source="displacement")}[rule_name]()
    closure()
    with open("/proc/self/clear_refs", "w") as f:  # reset the high-water mark to the current resident size
        f.write("5")
    baseline = _status_kib("VmRSS")
    for _ in range(steps):
        rule.step(params, opt, closure)
    return (_status_kib("VmHWM") - baseline) * 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--params", type=int, default=100_000_000)
    p.add_argument("--tensors", type=int, default=25)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--memory-child", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.memory_child:
        print(json.dumps(extra_peak_of_steps(a.memory_child, a.params, a.tensors, steps=2)))
        return

    n_bytes = a.params * 4
    print(f"parameters: {a.params:,} float32 in {a.tensors} tensors ({n_bytes / 2**20:.0f} MiB), "
          f"{torch.get_num_threads()} threads")
    t = time_arithmetic(a.params, a.tensors, a.repeat)
    print(f"one copy of the parameters:        {t['copy'] * 1e3:8.1f} ms")
    print("snapshots (copies into kept buffers): SFPO 1 copy (theta0), GXPO 2 copies (theta0, g0)")
    for name, what in (("sfpo", "SFPO reposition (lerp)"), ("gxpo_K3", "GXPO K=3 scale + reposition"),
                       ("gxpo_K10", "GXPO K=10 scale + reposition")):
        print(f"{what:30s} {t[name] * 1e3:8.1f} ms = {t[name] / t['copy']:5.2f} x copy (goal <= 4x)")

    # glibc raises its mmap threshold after large frees and then keeps freed blocks in the heap, which would
    # count allocator slack as peak memory; a fixed threshold returns every large block to the OS at once
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
    extra = {}
    for rule in ("grpo", "sfpo", "gxpo", "gxpo_displacement"):
        out = subprocess.run([sys.executable, __file__, "--memory-child", rule, "--params", str(a.params),
                              "--tensors", str(a.tensors)], capture_output=True, text=True, check=True, env=env)
        extra[rule] = json.loads(out.stdout)
    print(f"GRPOStep peak above params + grads: {extra['grpo'] / n_bytes:5.2f} x parameter bytes (reference)")
    for rule, goal in (("sfpo", "1"), ("gxpo", "2"), ("gxpo_displacement", "3, documented")):
        print(f"{rule:17s} extra peak memory: {(extra[rule] - extra['grpo']) / n_bytes:5.2f} x parameter bytes "
              f"(goal <= {goal})")


if __name__ == "__main__":
    main()
