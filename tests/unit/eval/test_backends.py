"""Generation backends: vLLM exercised up to the LLM call with a stand-in; backend selection."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from helpers import REPO
from workflow.config import EvalConfig
from workflow.benchmarks import graders
from workflow.eval.backends import VLLMBackend, resolve_backend, vllm_usable
from workflow.benchmarks.catalog import load
from workflow.eval.harness import run_benchmark

pytestmark = pytest.mark.serial("verl")  # README "Tests": one at a time with the other verl modules


class ChatTokenizer:
    """What vLLM's LLM.get_tokenizer() hands back for a chat model: a tokenizer with a chat template."""

    chat_template = "<chat>"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert not tokenize and add_generation_prompt
        return "".join(f"<|{m['role']}|>{m['content']}" for m in messages) + "<|assistant|>"


class FakeVLLM:
    """Records what a real vllm module would receive and answers in vLLM's output structure."""

    def __init__(self):
        self.llm_kwargs = None
        self.calls = []
        self.bars = []

    def SamplingParams(self, **kw):  # noqa: N802 - mirrors vllm's class name
        return SimpleNamespace(**kw)

    def LLM(self, **kw):  # noqa: N802
        self.llm_kwargs = kw
        fake = self

        class _LLM:
            def get_tokenizer(self):
                return ChatTokenizer()

            def generate(self, prompts, params, use_tqdm=True):
                fake.calls.append((prompts, params))
                fake.bars.append(use_tqdm)
                return [SimpleNamespace(outputs=[
                    SimpleNamespace(text=f"{p} -> \\boxed{{{j}}}", token_ids=list(range(j + 1)),
                                    finish_reason="length" if j == params.n - 1 else "stop")
                    for j in range(params.n)]) for p in prompts]
        return _LLM()


def test_vllm_backend_passes_settings_and_maps_outputs():
    fake = FakeVLLM()
    backend = VLLMBackend("/ckpt/step_000040", tensor_parallel_size=2, gpu_memory_utilization=0.7,
                          max_model_len=4096, seed=3, vllm=fake)
    assert fake.llm_kwargs == {"model": "/ckpt/step_000040", "tensor_parallel_size": 2,
                               "gpu_memory_utilization": 0.7, "seed": 3, "dtype": "auto", "max_model_len": 4096}
    out = backend.generate(["a", "b"], n=3, temperature=0.6, top_p=0.95, max_tokens=128, seed=7)
    (prompts, params), = fake.calls
    assert prompts == ["a", "b"]
    assert vars(params) == {"n": 3, "temperature": 0.6, "top_p": 0.95, "max_tokens": 128, "seed": 7}
    assert [[s.text for s in row] for row in out] == [[f"{p} -> \\boxed{{{j}}}" for j in range(3)] for p in "ab"]
    assert [s.n_tokens for s in out[0]] == [1, 2, 3]
    assert [s.truncated for s in out[0]] == [False, False, True]  # finish_reason "length" = hit max_tokens


def test_on_cpu_vllm_runs_in_this_process_in_fp32_unless_told_otherwise(monkeypatch, tmp_path):
    for k in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_TARGET_DEVICE"):
        monkeypatch.delenv(k, raising=False)
    fake = FakeVLLM()
    VLLMBackend("/ckpt", device="cpu", vllm=fake)
    # whole prompts per engine step: a chunked prefill rewinds the seeded generator, which fails on a CPU
    assert fake.llm_kwargs == {"model": "/ckpt", "tensor_parallel_size": 1, "seed": 0, "dtype": "float32",
                               "enforce_eager": True, "distributed_executor_backend": "uni",
                               "enable_chunked_prefill": False, "max_num_batched_tokens": 2048}
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and os.environ["VLLM_TARGET_DEVICE"] == "cpu"
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # the user's setting wins
    VLLMBackend("/ckpt", device="cpu", tensor_parallel_size=2, vllm=fake)
    assert "distributed_executor_backend" not in fake.llm_kwargs
    model = tmp_path / "model"  # a step as long as the model's context, which vLLM requires without chunking
    model.mkdir()
    (model / "config.json").write_text('{"max_position_embeddings": 8192}')
    VLLMBackend(model, device="cpu", vllm=fake)
    assert fake.llm_kwargs["max_num_batched_tokens"] == 8192
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"


def test_the_checkpoints_chat_template_shapes_every_eval_prompt():
    """The eval harness takes the tokenizer from the backend: a real model's chat template wraps each prompt."""
    fake = FakeVLLM()
    backend = VLLMBackend("/ckpt/step_000040", vllm=fake)
    items = load("math500", path=REPO / "tests" / "fixtures" / "benchmarks" / "math500.jsonl")
    run_benchmark(backend, "math500", items, EvalConfig(benchmarks=["math500"], k=2, bootstrap=10), graders.make("exact"))
    (prompts, _), = fake.calls
    assert len(prompts) == len(items)
    assert all(p.startswith("<|user|>") and p.endswith("<|assistant|>") and "\\boxed{}" in p for p in prompts)
    assert items[0].question in prompts[0]


def test_backend_selection_on_this_machine():
    assert resolve_backend("local") == "local"
    assert resolve_backend("auto") == ("vllm" if vllm_usable() else "local")
    if not vllm_usable():
        with pytest.raises(RuntimeError, match="vllm is not installed or there is no CUDA device"):
            resolve_backend("vllm")
    with pytest.raises(ValueError):
        resolve_backend("sglang")


def test_vllms_own_log_goes_to_the_jobs_file_and_only_its_errors_to_the_terminal(tmp_path, monkeypatch, capfd):
    """Before: a vLLM eval job printed vLLM's INFO lines (its engine config, memory, compilation: ~100) and a dozen
    warnings (optional libraries missing) to the terminal Snakemake reports on. vLLM reads VLLM_LOGGING_CONFIG_PATH
    when it is imported; the backend points it at a config that sends vLLM's log to the eval job's vllm.log and only
    its errors to stderr, unless the user set one; what the engine's start prints besides (C++ and Python warnings,
    written to the process's stderr) goes to the same file."""
    import json
    import logging.config
    monkeypatch.delenv("VLLM_LOGGING_CONFIG_PATH", raising=False)
    monkeypatch.delenv("VLLM_CONFIGURE_LOGGING", raising=False)
    noisy = FakeVLLM()
    real_llm = noisy.LLM

    def starting(**kw):  # a C++ warning as vLLM's CPU worker prints one, straight to file descriptor 2
        os.write(2, b"[W utils.cpp:68] Warning: NUMA binding\n")
        return real_llm(**kw)
    noisy.LLM = starting
    VLLMBackend("m", vllm=noisy, log=tmp_path / "vllm.log", label="eval 0123456789ab step 3")
    logging.config.dictConfig(json.loads(open(os.environ["VLLM_LOGGING_CONFIG_PATH"]).read()))  # as vLLM does
    logging.getLogger("vllm.engine").info("Initializing a V1 LLM engine")
    logging.getLogger("vllm.worker").warning("KV cache is small")
    logging.getLogger("vllm.worker").error("the engine core died")
    for h in logging.getLogger("vllm").handlers:
        h.flush()
    log = (tmp_path / "vllm.log").read_text()
    assert "Initializing a V1 LLM engine" in log and "KV cache is small" in log and "NUMA binding" in log
    err = capfd.readouterr().err
    assert "the engine core died" in err and "KV cache is small" not in err and "Initializing" not in err
    assert "NUMA binding" not in err and f"eval 0123456789ab step 3: vLLM's log goes to {tmp_path}" in err
    mine = tmp_path / "mine.json"
    monkeypatch.setenv("VLLM_LOGGING_CONFIG_PATH", str(mine))
    VLLMBackend("m", vllm=FakeVLLM(), log=tmp_path / "other.log")
    assert os.environ["VLLM_LOGGING_CONFIG_PATH"] == str(mine)  # the user's own configuration stands
    for h in logging.getLogger("vllm").handlers:
        h.close()
    logging.getLogger("vllm").handlers.clear()


def test_vllms_progress_bar_becomes_our_progress_lines_and_a_quick_one_prints_nothing(capsys, monkeypatch):
    """vLLM redraws a bar every few tokens, and several eval jobs share one terminal: the backend hands vLLM a tqdm
    class that draws nothing and prints a compact line at most every 5 s, labelled with the job, and nothing at all
    for a bar over within 5 s (vLLM rendering prompts)."""
    from workflow import progress
    fake = FakeVLLM()
    backend = VLLMBackend("/ckpt", vllm=fake, label="eval 0123456789ab step 20")
    backend.generate(["a"], n=1, temperature=1.0, top_p=1.0, max_tokens=8, seed=0)
    bar_class = fake.bars[0]
    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    quick = bar_class(total=4, desc="Rendering prompts")
    quick.update(4)
    quick.close()
    slow = bar_class(total=10, desc="Processed prompts", dynamic_ncols=True, postfix="speed")
    for _ in range(10):
        clock[0] += 3.0  # 3 s a prompt: a line every other prompt at most (every 5 s), and the last
        slow.update(1)
    slow.close()
    lines = capsys.readouterr().err.splitlines()
    assert all(line.startswith("eval 0123456789ab step 20 Processed prompts ") for line in lines), lines
    assert [line.split()[6] for line in lines] == ["2/10", "4/10", "6/10", "8/10", "10/10"]
