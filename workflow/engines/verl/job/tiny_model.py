"""A tiny random Qwen2 with a byte-level tokenizer, built locally (nothing is downloaded): the model the verl chain
runs on CPUs (CI, a laptop, `rlsweep smoke`). Sweeps name it `engine.verl.model_path: rlsweep:tiny` (resolved by
workflow/models.py); each stage builds the same weights (fixed seed) in its own directory.

Byte-level because transformers 5 loads any model_type=qwen2 tokenizer as a byte-level Qwen2Tokenizer (a
character vocabulary would map "\\n" and " " to nothing), and verl's agent loop needs "\\n" as one token and a
ChatML `<|im_end|>`: 256 byte tokens + ChatML specials, a ChatML chat template.
"""

from __future__ import annotations

from pathlib import Path

from workflow.atomic import replacing
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def write_tiny_model(path: str | Path, seed: int = 0, layers: int = 2, hidden: int = 64, heads: int = 2) -> Path:
    """A Hugging Face model directory (config, weights, tokenizer) at `path`, written atomically; an existing one
    is kept (every stage asks for it; the fixed seed makes it the same model)."""
    path = Path(path)
    if path.exists():
        return path
    import torch
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[], continuing_subword_prefix="",
                               end_of_word_suffix=""))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True) for s in SPECIALS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    cfg = Qwen2Config(vocab_size=(len(fast) + 15) // 16 * 16, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                      max_position_embeddings=2048, tie_word_embeddings=False, pad_token_id=fast.pad_token_id,
                      eos_token_id=fast.eos_token_id, bos_token_id=None)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.eos_token_id = fast.eos_token_id
    model.generation_config.pad_token_id = fast.pad_token_id
    with replacing(path) as tmp:
        fast.save_pretrained(tmp)
        model.save_pretrained(tmp)
    return path



def build_in(stage_dir: Path) -> Path:
    """rlsweep:tiny for one stage (workflow/models.py's resolver): built in the stage's directory."""
    return write_tiny_model(Path(stage_dir) / "tiny_model")
