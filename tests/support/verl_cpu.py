"""What the tests need to drive verl 0.9's training engine directly on a CPU (never imported by the engine): the
package's CPU platform, a tiny random Qwen2 with a character-level Hugging Face tokenizer saved as a model directory,
FSDPEngineWithLMHead built directly (verl's engine registry only knows cuda/npu) with FSDP2, fp32 and sdpa
attention, and GRPO batches in verl's padded layout."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch


def use_cpu_platform() -> None:
    """verl on the CPU platform the package ships for engine.verl.device: cpu (workflow/engines/verl/compat/cpu.py)."""
    from workflow.engines.verl.compat.cpu import use_cpu_platform as package_platform
    package_platform()


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
