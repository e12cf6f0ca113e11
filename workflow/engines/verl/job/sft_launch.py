"""How SFT on verl is launched: verl 0.9's own SFT trainer (sft_trainer.py) in one process per GPU under torchrun,
on this node, or for nnodes > 1 one torchrun per node of the SLURM allocation through `srun --overlap`, meeting at
the first node (c10d rendezvous)."""

from __future__ import annotations

import sys
from pathlib import Path

from workflow.engines.verl.contract import SFT_TRAINER_MODULE


def command(config_path: Path, log_path: Path, *, n_gpus_per_node: int, nodes: list[str] | None = None,
            port: int = 29500, job_id: str = "rlsweep") -> list[str]:
    """argv that runs verl's SFT trainer on n_gpus_per_node processes on each node (nodes None = this node)."""
    entry = ["-m", SFT_TRAINER_MODULE, str(config_path), str(log_path)]
    torchrun = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={n_gpus_per_node}"]
    if not nodes or len(nodes) == 1:
        return [*torchrun, "--standalone", *entry]
    return ["srun", "--overlap", f"--nodes={len(nodes)}", "--ntasks-per-node=1", f"--nodelist={','.join(nodes)}",
            "--kill-on-bad-exit=1", *torchrun, f"--nnodes={len(nodes)}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={nodes[0]}:{port}", f"--rdzv-id={job_id}", *entry]
