"""What it takes to run verl 0.9's training engine on a CPU, for the tests (never imported by the engine):
a verl platform for the CPU (device "cpu", gloo), a tiny random Qwen2 with a character-level Hugging Face
tokenizer saved as a model directory, FSDPEngineWithLMHead built directly (verl's engine registry only knows
cuda/npu) with FSDP2, fp32 and sdpa attention, and GRPO batches in verl's padded layout."""

from __future__ import annotations

import contextlib
import os
from functools import partial
from pathlib import Path

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry, set_platform


class _CPUDeviceModule:
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


class PlatformCPU(PlatformBase):
    device_name = property(lambda self: "cpu")
    vendor_name = property(lambda self: "cpu")
    device_module = property(lambda self: _CPUDeviceModule())

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
    def ray_resource_name(self): return "CPU"


def use_cpu_platform() -> None:
    PlatformRegistry.register(platform="cpu")(PlatformCPU)
    set_platform(PlatformCPU())
    # verl's engine registry knows FSDPEngineWithLMHead for cuda/npu only; its own override picks it on the CPU
    os.environ["VERL_ENGINE_DEVICE"] = "cuda"


VOCAB = list("0123456789+-*/=()?:QA \\{}boxed.\n")


def write_tiny_model(path: Path, seed: int = 0) -> Path:
    """A 1-layer Qwen2 (~15k parameters) + a character-level PreTrainedTokenizerFast, as an HF model directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    # a chat template (the prompt as is), so verl's RLHFDataset can apply one as it does for real models
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    fast.save_pretrained(path)
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False, pad_token_id=0,
                      eos_token_id=1, bos_token_id=1)
    torch.manual_seed(seed)
    Qwen2ForCausalLM(cfg).save_pretrained(path)
    return path


def build_engine(model_dir: Path, lr: float = 1e-2, clip_grad: float = 1.0e9):
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
    engine = FSDPEngineWithLMHead(
        model_config=HFModelConfig(path=str(model_dir), override_config={"attn_implementation": "sdpa"}),
        # fp32 throughout: verl's default bf16 autocast makes results depend on how a batch is padded
        engine_config=FSDPEngineConfig(strategy="fsdp2", model_dtype="fp32", dtype="float32", use_torch_compile=False,
                                       mixed_precision={"param_dtype": "fp32", "reduce_dtype": "fp32",
                                                        "buffer_dtype": "fp32"}),
        optimizer_config=FSDPOptimizerConfig(lr=lr, clip_grad=clip_grad, total_training_steps=100, weight_decay=0.0),
        checkpoint_config=CheckpointConfig())
    engine.initialize()
    return engine


def ppo_loss_fn(loss_agg_mode: str = "token-mean"):
    from verl.workers.config import FSDPActorConfig
    from verl.workers.utils.losses import ppo_loss
    cfg = FSDPActorConfig(strategy="fsdp2", rollout_n=1, ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=2,
                          clip_ratio_low=0.2, clip_ratio_high=0.28, loss_agg_mode=loss_agg_mode)
    return partial(ppo_loss, config=cfg)


def grpo_batch(seed: int, rows: slice, micro: int = 2, global_rows: int = 8, prompt_len: int = 5,
               response_len: int = 6):
    """A GRPO mini-batch in verl's layout (prompt left-padded, response right-padded, then no-padding), rows
    `rows` of a global batch of `global_rows` that every rank generates identically from `seed`."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding
    B, P, R = global_rows, prompt_len, response_len
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(3, len(VOCAB) + 3, (B, P), generator=g)
    resp = torch.randint(3, len(VOCAB) + 3, (B, R), generator=g)
    plen = torch.randint(2, P + 1, (B,), generator=g)
    rlen = torch.randint(1, R + 1, (B,), generator=g)
    pmask = (torch.arange(P)[None] >= (P - plen)[:, None]).long()
    rmask = (torch.arange(R)[None] < rlen[:, None]).long()
    attention = torch.cat([pmask, rmask], 1)
    adv = (torch.randn(B, generator=g)[:, None] * rmask).float()
    old = ((-3.0 + 0.5 * torch.randn(B, R, generator=g)) * rmask).float()  # off-policy enough for the clip to bind
    td = TensorDict({"prompts": (prompt * pmask)[rows], "responses": (resp * rmask)[rows],
                     "input_ids": torch.cat([prompt * pmask, resp * rmask], 1)[rows], "attention_mask": attention[rows],
                     "position_ids": (attention.cumsum(1) - 1).clamp_min(0)[rows],
                     "response_mask": rmask.float()[rows], "old_log_probs": old[rows], "advantages": adv[rows],
                     "temperature": torch.ones(B)[rows]}, batch_size=[len(range(B)[rows])])
    td = left_right_2_no_padding(td)
    # use_remove_padding packs a micro-batch into one row, which needs varlen (flash) attention to keep sequences
    # apart; sdpa on CPU would let them attend to each other, so the padded path here
    tu.assign_non_tensor(td, calculate_entropy=False, global_batch_size=B, use_remove_padding=True,
                         use_dynamic_bsz=False, micro_batch_size_per_gpu=micro, use_fused_kernels=False,
                         max_token_len_per_gpu=4096)
    return td


def full_params(engine) -> dict[str, torch.Tensor]:
    return {n: p.full_tensor().detach().clone() for n, p in engine.module.named_parameters()}


def sft_batch(seed: int, rows: slice, micro: int):
    """An SFT batch in verl's no-padding layout: loss on the response tokens, loss_mask nested like input_ids."""
    td = grpo_batch(seed, rows, micro)
    ids = td["input_ids"]
    lengths = ids.offsets().diff().tolist()
    response = td["response_mask"].sum(-1).long().tolist()
    values = torch.cat([torch.cat([torch.zeros(n - r), torch.ones(r)]) for n, r in zip(lengths, response)])
    td["loss_mask"] = torch.nested.nested_tensor_from_jagged(values, offsets=ids.offsets())
    return td
