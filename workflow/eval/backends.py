"""Generation backends behind one interface: vLLM (offline LLM.generate) and the local torch engine.

    backend.generate(prompts, n, temperature, top_p, max_tokens, seed) -> [[Sample] * n] * len(prompts)

`eval.backend: auto` picks vLLM when CUDA is available and vllm is importable, the local engine otherwise.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Protocol

from workflow.engines.base import Sample


class GenerationBackend(Protocol):
    def generate(self, prompts: list[str], n: int, temperature: float, top_p: float, max_tokens: int,
                 seed: int) -> list[list[Sample]]: ...


class LocalBackend:
    """The engine's own sampler (pure softmax / T; top_p must be 1)."""

    def __init__(self, engine, ckpt: Path):
        self.engine, self.ckpt = engine, ckpt

    def generate(self, prompts, n, temperature, top_p, max_tokens, seed):
        if top_p != 1.0:
            raise ValueError("the local backend samples from the full distribution; set eval.top_p: 1.0")
        return self.engine.generate(self.ckpt, prompts, n=n, temperature=temperature, max_new_tokens=max_tokens,
                                    seed=seed)


class VLLMBackend:
    """Offline vLLM: one `LLM` per checkpoint, n samples per prompt in one `generate` call.

    `vllm` can be passed in (a module-like object with LLM and SamplingParams); tests use that to exercise
    everything up to the vLLM call on a CPU machine."""

    def __init__(self, model: str | Path, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                 max_model_len: int | None = None, seed: int = 0, dtype: str = "auto", vllm: Any = None):
        if vllm is None:
            import vllm  # noqa: PLC0415 - optional dependency, only on GPU machines
        self.vllm = vllm
        kwargs = dict(model=str(model), tensor_parallel_size=tensor_parallel_size,
                      gpu_memory_utilization=gpu_memory_utilization, seed=seed, dtype=dtype)
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        self.llm = vllm.LLM(**kwargs)

    def generate(self, prompts, n, temperature, top_p, max_tokens, seed):
        params = self.vllm.SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                                          seed=seed)
        outputs = self.llm.generate(prompts, params, use_tqdm=True)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outputs)} results for {len(prompts)} prompts")
        result = []
        for out in outputs:
            samples = [Sample(text=c.text, n_tokens=len(c.token_ids), truncated=c.finish_reason == "length")
                       for c in out.outputs]
            if len(samples) != n:
                raise RuntimeError(f"vLLM returned {len(samples)} samples for a prompt, expected {n}")
            result.append(samples)
        return result


def vllm_usable() -> bool:
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch
    return torch.cuda.is_available()


def resolve_backend(name: str) -> str:
    """auto -> vllm | local; an explicit vllm that cannot run here is an error, not a silent fallback."""
    if name == "auto":
        return "vllm" if vllm_usable() else "local"
    if name == "vllm" and not vllm_usable():
        raise RuntimeError("eval.backend is vllm, but vllm is not installed or there is no CUDA device here "
                           "(pip install -e '.[vllm]' on a GPU node, or use eval.backend: auto / local)")
    if name not in ("vllm", "local"):
        raise ValueError(f"unknown eval backend {name!r}")
    return name
