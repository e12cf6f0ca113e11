"""Tiny causal LMs for the local engine: character tokenizer, model from a transformers config, KV-cache sampling,
and the per-step seeds that make every random draw reproducible.

Nothing is downloaded: the model is a randomly initialised `Qwen2ForCausalLM` built from `ModelConfig`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from workflow.config import ModelConfig

if TYPE_CHECKING:
    from transformers import Qwen2ForCausalLM


def qwen2():
    """transformers' Qwen2 classes, imported when a model is built or loaded: a stage job that makes no model (data,
    aggregate, an evaluation copied from another run's) does not pay their import (~2.5 s: it pulls torch._dynamo)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()  # per-shard bars for a 1 MB model are noise in a sweep's log
    return Qwen2Config, Qwen2ForCausalLM


class CharTokenizer:
    """One token per character of a fixed alphabet, plus <pad> and <eos>."""

    PAD, EOS = 0, 1
    ALPHABET = "0123456789+-*/=?()QA:,.\\{}abdeforx "

    def __init__(self) -> None:
        self.itos = ["<pad>", "<eos>", *self.ALPHABET]
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.stoi[c] for c in text]
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} is not in the tokenizer alphabet") from None

    def decode(self, ids) -> str:
        return "".join(self.itos[i] for i in ids if i > self.EOS)


TOKENIZER = CharTokenizer()


def step_seed(*parts: int) -> int:
    """A 63-bit seed derived from (seed, step, stream, ...) independent of anything that ran before: every random
    draw of step t comes from it, so a stage restarted from its step-k checkpoint replays steps k+1... bit for bit."""
    return int(np.random.SeedSequence(list(parts)).generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))


def micro_slices(n: int, size: int | None) -> list[slice]:
    size = size or n
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def device() -> torch.device:
    """Where the local engine trains and samples: the GPU whenever torch sees one."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def model_device(model) -> torch.device:
    """The device of a model's weights: where every tensor that meets them must be made."""
    return next(model.parameters()).device


def load_model(ckpt: Path) -> Qwen2ForCausalLM:
    return qwen2()[1].from_pretrained(ckpt, dtype=torch.float32).to(device())


def build_model(cfg: ModelConfig, vocab_size: int, seed: int) -> Qwen2ForCausalLM:
    """A random-init model on the training device (like load_model's). Initialised on the CPU from `seed`, then
    moved: the same weights whatever the device (a CUDA generator draws other numbers)."""
    qwen2_config, qwen2_model = qwen2()
    hf = qwen2_config(
        vocab_size=vocab_size, hidden_size=cfg.hidden, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_heads, intermediate_size=cfg.mlp_ratio * cfg.hidden,
        max_position_embeddings=cfg.max_positions, tie_word_embeddings=True,
        pad_token_id=CharTokenizer.PAD, eos_token_id=CharTokenizer.EOS, bos_token_id=None,
    )
    torch.manual_seed(seed)
    with torch.device("cpu"):
        model = qwen2_model(hf)
    return model.to(device())


def left_pad(seqs: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long, device="cpu")
    mask = torch.zeros((len(seqs), width), dtype=torch.long, device="cpu")
    for i, s in enumerate(seqs):
        ids[i, width - len(s):] = torch.tensor(s, device="cpu")
        mask[i, width - len(s):] = 1
    return ids, mask


@torch.no_grad()
def sample(model, prompts: list[list[int]], temperature: float, max_new_tokens: int,
           generator: torch.Generator | None) -> tuple[list[list[int]], list[bool]]:
    """Sample one continuation per prompt with a KV cache; temperature 0 = greedy. Pure ancestral sampling from
    softmax(logits / T): no top-k / top-p, so the samples are from the policy the RL loss assumes.

    Returns the generated ids (without the final <eos>) and whether each hit max_new_tokens without an <eos>.
    """
    device = model_device(model)
    ids, mask = left_pad(prompts, CharTokenizer.PAD)
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    cache, logits = out.past_key_values, out.logits[:, -1]
    next_pos = positions[:, -1:] + 1
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    generated = torch.full((len(prompts), max_new_tokens), CharTokenizer.PAD, dtype=torch.long, device=device)
    for t in range(max_new_tokens):
        if temperature == 0:
            tok = logits.argmax(-1)
        else:
            probs = torch.softmax(logits.float() / temperature, dim=-1)
            tok = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        tok = torch.where(done, torch.full_like(tok, CharTokenizer.PAD), tok)
        generated[:, t] = tok
        done |= tok == CharTokenizer.EOS
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        out = model(input_ids=tok.unsqueeze(1), attention_mask=mask, position_ids=next_pos,
                    past_key_values=cache, use_cache=True)
        cache, logits, next_pos = out.past_key_values, out.logits[:, -1], next_pos + 1
    responses, truncated = [], []
    for row in generated.tolist():
        if CharTokenizer.EOS in row:
            responses.append(row[: row.index(CharTokenizer.EOS)])
            truncated.append(False)
        else:
            responses.append([t for t in row if t != CharTokenizer.PAD])
            truncated.append(True)
    return responses, truncated


def pack(prompts: list[list[int]], targets: list[list[int]], add_eos: list[bool]) -> dict[str, torch.Tensor]:
    """Right-padded prompt+target sequences for a teacher-forced forward pass, assembled on the CPU (forward_logits
    moves the rows it runs to the model's device).

    `input_ids` [B, T]; `labels` [B, T-1] are the next tokens; `loss_mask` [B, T-1] marks target tokens
    (the appended <eos> included, so models learn to stop)."""
    seqs, starts = [], []
    for p, t, eos in zip(prompts, targets, add_eos):
        seqs.append(p + t + ([CharTokenizer.EOS] if eos else []))
        starts.append(len(p))
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), CharTokenizer.PAD, dtype=torch.long, device="cpu")
    attn = torch.zeros((len(seqs), width), dtype=torch.long, device="cpu")
    loss_mask = torch.zeros((len(seqs), width - 1), dtype=torch.float32, device="cpu")
    for i, (s, start) in enumerate(zip(seqs, starts)):
        ids[i, : len(s)] = torch.tensor(s, device="cpu")
        attn[i, : len(s)] = 1
        loss_mask[i, start - 1: len(s) - 1] = 1.0  # position j predicts token j+1
    return {"input_ids": ids, "attention_mask": attn, "labels": ids[:, 1:], "loss_mask": loss_mask}


def prefix_mask(loss_mask: torch.Tensor, prefix: list[int]) -> torch.Tensor:
    """[B, T-1] bool: the first prefix[i] target tokens of row i (a demonstration prefix forced before the policy's
    own continuation), in the same alignment as `loss_mask`; never beyond the row's own targets."""
    out = torch.zeros(loss_mask.shape, dtype=torch.bool, device=loss_mask.device)
    starts = (loss_mask > 0).float().argmax(dim=1)
    for i, (start, n) in enumerate(zip(starts.tolist(), prefix)):
        out[i, start: start + n] = True
    return out & (loss_mask > 0)


def forward_logits(model, batch: dict[str, torch.Tensor], rows: slice | None = None) -> torch.Tensor:
    """Logits aligned with batch['labels'] ([B, T-1, V]) for the selected rows of a `pack()`ed batch.

    No padding mask goes to the model: pack() right-pads, so under the causal mask no real token attends to a pad,
    and the pads' own logits are never trained or scored (their loss weights are 0). The outputs at real tokens are
    the same, and transformers' SDPA path then has no padding mask to ask the device about (`padding_mask.all()`:
    a host sync each forward)."""
    rows = rows or slice(None)
    device = model_device(model)
    out = model(input_ids=batch["input_ids"][rows].to(device))
    return out.logits[:, :-1]
