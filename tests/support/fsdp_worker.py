"""One rank of the FSDP2 check in test_distributed.py (run as a subprocess, 2 gloo CPU ranks).

Every rank builds the same model, shards it with torch.distributed.fsdp.fully_shard, runs a few update-rule
steps on the same batch, and writes its full (gathered) parameters and step stats to OUT/rank<r>.pt."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from rule_problems import mlp_closure, mlp_problem
from workflow.methods.gxpo.algorithm import GXPO
from workflow.methods.sfpo.algorithm import SFPO


def make_rule(name: str):
    if name == "gxpo":
        return GXPO(K=5, alpha=0.5, window=2, warmup=2, tau=1.0)
    return SFPO(K=3, alpha=0.5, window=2, tau=1.0)


def run(rank: int, world: int, init_file: str, out: str, rule_name: str, steps: int) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    model, x, y = mlp_problem(seed=0)
    fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    sharded = [p for p in model.parameters() if isinstance(p, DTensor)]
    assert len(sharded) == 4 and all(p.to_local().numel() < p.numel() for p in sharded)  # really sharded
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    rule = make_rule(rule_name)
    stats = []
    spikes = [1.0, 1.01, 0.99, 1.0, 30.0, 1.0]
    for t in range(steps):
        rule.on_rollout({"entropy": spikes[t]})  # the same plain floats on every rank
        scale = (lambda t=t: spikes[t] if rule_name == "gxpo" else 1.0)
        stats.append(rule.step(list(model.parameters()), opt, mlp_closure(model, opt, x, y, scale)).as_row())
    full = {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()}
    torch.save({"params": full, "stats": stats}, f"{out}/rank{rank}.pt")
    # every rank's traffic done before either tears gloo down: a rank destroying its group while the other still
    # finished its last all-gather aborted once in CI ("terminate called without an active exception")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    run(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
