"""LoRA (`model.lora`) through peft: which parameters train, and what a checkpoint holds.

    wrap(model, lora, seed)       peft adapters on the target modules; every other weight frozen (requires_grad off)
    write(model, dir)             a checkpoint's model: the merged model (what evaluation and the next stage load,
                                  an ordinary Hugging Face directory) + the adapter alone under `adapter/`
    load_adapter(model, dir)      resume: the adapter of a checkpoint into a wrapped model (its base is the stage's
                                  start, which LoRA never changes)
    fold_exported_adapter(dir, base)  verl's export of a LoRA run (its merger leaves base weights + lora_adapter/)
                                  made the same kind of checkpoint: the adapter folded into the start model

The local engine's parameter list is `trainable(model)`, so the update rules' extra state (SFPO's slow weights, GXPO's
gradient probes and ratios) and the optimizer's moments are adapter-sized; the base weights stay bit-identical.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from workflow.config import LoRAConfig

ADAPTER = "adapter"  # a checkpoint's sub-directory holding the adapter (peft's adapter_model.safetensors + config)


def wrap(model, lora: LoRAConfig, seed: int):
    """The model with LoRA adapters on `lora.target_modules` (A drawn from `seed`, B zero: the wrapped model starts
    as the model); a target that matches no module is an error naming the model's linear layers."""
    from peft import LoraConfig, get_peft_model

    linear = sorted({name.rsplit(".", 1)[-1] for name, mod in model.named_modules() if isinstance(mod, torch.nn.Linear)})
    missing = [m for m in lora.target_modules if m not in linear]
    if missing:
        raise ValueError(f"model.lora.target_modules: {missing} name no linear layer of the model; it has {linear}")
    torch.manual_seed(seed)
    config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, target_modules=list(lora.target_modules),
                        lora_dropout=lora.dropout, bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def is_wrapped(model) -> bool:
    from peft import PeftModel
    return isinstance(model, PeftModel)


def trainable(model) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def merged(model):
    """A plain model with the adapters folded into the base weights (W + alpha/r B A), the wrapped model untouched."""
    return copy.deepcopy(model).merge_and_unload()


def write(model, directory: Path) -> None:
    """A checkpoint's model files: a wrapped model as its merged model + `adapter/`; any other as it is."""
    if not is_wrapped(model):
        model.save_pretrained(directory)
        return
    merged(model).save_pretrained(directory)
    model.save_pretrained(Path(directory) / ADAPTER)


def load_adapter(model, directory: Path) -> None:
    """Load a checkpoint's adapter weights into a wrapped model (resume)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(directory) / ADAPTER / "adapter_model.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"{directory} has no LoRA adapter ({path}): it was not written by a LoRA stage")
    result = set_peft_model_state_dict(model, load_file(path))
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise ValueError(f"{path}: adapter weights the model has no place for: {unexpected[:3]}")


VERL_ADAPTER = "lora_adapter"  # where verl's model merger puts a LoRA run's adapter (next to the base weights)


def fold_exported_adapter(model_dir: Path, base: str | Path | None = None) -> bool:
    """verl's merger writes a LoRA run as its base weights (bf16) + `lora_adapter/`, which evaluation would read as
    the untrained base. Fold the adapter into `base` (the run's start model in full precision; the merger's bf16
    copy when None), write the merged model (fp32) into `model_dir` and keep the adapter as `adapter/`. False when
    `model_dir` holds no adapter (full fine-tuning)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model_dir = Path(model_dir)
    adapter = model_dir / VERL_ADAPTER
    if not (adapter / "adapter_config.json").is_file():
        return False
    start = AutoModelForCausalLM.from_pretrained(base or model_dir, dtype=torch.float32)
    folded = PeftModel.from_pretrained(start, adapter).merge_and_unload()
    for old in model_dir.glob("model*.safetensors*"):  # the merger's weights (one file or shards + index)
        old.unlink()
    folded.save_pretrained(model_dir)
    adapter.rename(model_dir / ADAPTER)
    return True
