"""verl's checkpoints -> ours, so the eval stage (and anything else that reads `checkpoints/step_*`) finds a verl
run's weights where it finds a local run's.

verl's PPO trainer saves `<default_local_dir>/global_step_N/actor/` (its SFT trainer `global_step_N/`) as FSDP
shards (`model_world_size_W_rank_R.pt`) plus the Hugging Face config and tokenizer (`huggingface/`), and resumes
from them itself. Each of our checkpoints is the
merged Hugging Face model directory (verl's own FSDPModelMerger) + meta.json, written to a temporary sibling and
renamed into place like every checkpoint here. verl's merger writes bf16 whatever the training dtype; a LoRA run's
adapter is folded into its start model in fp32 (workflow/engines/lora.py: the merger alone would leave the base
weights, which evaluation would score as the trained policy).
"""

from __future__ import annotations

import re
from pathlib import Path

from workflow.atomic import replacing
from workflow.checkpoint import write_meta
from workflow.layout import step_dir

_GLOBAL_STEP = re.compile(r"^global_step_(\d+)$")


def verl_checkpoints(verl_dir: Path, model_dir: str = "actor") -> list[tuple[int, Path]]:
    """(step, model dir) of every complete verl checkpoint, oldest first; `model_dir` is where the shards are
    inside global_step_N ("actor" for PPO, "" for SFT)."""
    found = []
    if Path(verl_dir).is_dir():
        for p in Path(verl_dir).iterdir():
            m = _GLOBAL_STEP.match(p.name)
            if m and (p / model_dir / "huggingface" / "config.json").is_file():
                found.append((int(m.group(1)), p / model_dir))
    return sorted(found)


def export_checkpoint(actor_dir: Path, step: int, ckpt_root: Path, meta: dict, base_model: str | None = None) -> Path:
    """Merge one verl actor checkpoint into `ckpt_root/step_N` (kept if it already exists); `base_model` is the
    model the stage started from (a LoRA run's adapter is folded into it)."""
    from workflow.engines.lora import fold_exported_adapter
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger
    final = step_dir(ckpt_root, step)
    if final.exists():
        return final
    with replacing(final) as tmp:
        FSDPModelMerger(ModelMergerConfig(operation="merge", backend="fsdp", local_dir=str(actor_dir),
                                          target_dir=str(tmp),
                                          hf_model_config_path=str(Path(actor_dir) / "huggingface"))).merge_and_save()
        fold_exported_adapter(tmp, base_model)
        write_meta(tmp, {**meta, "step": step, "engine": "verl"})
    return final


def export_all(verl_dir: Path, ckpt_root: Path, meta: dict, model_dir: str = "actor",
               base_model: str | None = None) -> list[Path]:
    """Every verl checkpoint not exported yet (the eval stage evaluates every `eval.every` steps)."""
    return [export_checkpoint(d, step, ckpt_root, meta, base_model) for step, d in verl_checkpoints(verl_dir, model_dir)]
