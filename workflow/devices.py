"""The GPUs a process may use and their kind, light to import (no torch): what a runs row, a live file and the
executor record say a job ran on (0 GPUs: the CPU)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def visible_gpus() -> tuple[int, str | None]:
    """The NVIDIA GPUs this process may use, and their kind, without importing torch: CUDA_VISIBLE_DEVICES where it
    is set (SLURM sets it to the allocation; "" or -1: none) on a machine with a GPU device, else the driver's list
    (/proc/driver/nvidia/gpus);
    (0, None) on a machine without them. A process that has initialised CUDA answers from torch instead."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        n = torch.cuda.device_count()
        return n, torch.cuda.get_device_name(torch.cuda.current_device()) if n else None
    try:
        found = sorted(Path("/proc/driver/nvidia/gpus").iterdir())
    except OSError:
        found = []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not found and not _has_gpu_device():
        n = 0  # no GPU whatever the variable says (a job environment or a CI image may set it on a CPU machine)
    elif visible is not None:
        ids = [v for v in visible.split(",") if v.strip()]
        n = 0 if not ids or ids[0].strip().startswith("-") else len(ids)
    else:
        n = len(found)
    return (n, _model(found[0]) if n and found else None)


def _has_gpu_device() -> bool:
    """An NVIDIA device node (/dev/nvidia0…) or WSL's GPU (/dev/dxg): where the driver's list is absent, whether
    there is a GPU for CUDA_VISIBLE_DEVICES to name at all."""
    return Path("/dev/dxg").exists() or any(Path("/dev").glob("nvidia[0-9]*"))


def _model(gpu: Path) -> str | None:
    """A GPU's model name from the driver's information file ("Model:  NVIDIA H200")."""
    try:
        for line in (gpu / "information").read_text().splitlines():
            if line.startswith("Model:"):
                return line.partition(":")[2].strip() or None
    except OSError:
        pass
    return None


def device_used(stage: str) -> dict:
    """The runs columns saying what a stage job ran on: `gpus` (0: the CPU) and `gpu_kind`. A training or eval job
    runs on the GPUs it can see (every engine uses them when there; verl's workers hold them in other processes), a
    data, overlap or copy job on the CPU."""
    n, kind = visible_gpus() if stage in ("pretrain", "sft", "rl", "eval") else (0, None)
    return {"gpus": n, "gpu_kind": kind if n else None}
