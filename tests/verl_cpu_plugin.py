"""Imported by verl itself in the processes our engine starts (torchrun ranks) when a test sets
VERL_USE_EXTERNAL_MODULES=verl_cpu_plugin with tests/ on PYTHONPATH: puts verl on the CPU platform of verl_cpu.py.
The engine never imports this; it is how the tests reach verl's code below our launch boundary."""

import os

import torch.distributed as dist
import verl.utils.distributed

import verl_cpu

verl_cpu.use_cpu_platform()


def _init_gloo(timeout_second: int = 36000):
    # verl asks for "cpu:gloo,<device>:<nccl>", which on the CPU platform names the cpu backend twice
    dist.init_process_group("gloo")
    return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


verl.utils.distributed.initialize_global_process_group = _init_gloo
