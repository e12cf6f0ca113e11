"""Checkpoints: `<stage>/checkpoints/step_000040/` = a Hugging Face model directory + `trainer_state.pt` +
`meta.json` (where they live and how they are listed: workflow/layout.py).

Each checkpoint is written to a temporary sibling and renamed into place (workflow/atomic.py), so a directory named
`step_*` is always complete: a stage killed mid-save resumes from the previous one. Old checkpoints are never
deleted here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import torch

from workflow.atomic import replacing
from workflow.layout import step_dir


def save_checkpoint(root: str | Path, step: int, model, trainer_state: dict[str, Any], meta: dict[str, Any],
                    write_model: Callable[[Path], None] | None = None) -> Path:
    """`write_model(dir)` writes the model's files (default `model.save_pretrained`; a LoRA stage writes the merged
    model and its adapter, workflow/engines/lora.py)."""
    final = step_dir(root, step)
    if final.exists():  # already saved by an earlier attempt that died after the rename: keep it
        return final
    with replacing(final) as tmp:
        (write_model or model.save_pretrained)(tmp)
        torch.save(trainer_state, tmp / "trainer_state.pt")
        write_meta(tmp, {**meta, "step": step})
    return final


def write_meta(ckpt: Path, meta: dict[str, Any]) -> None:
    (Path(ckpt) / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))


def load_trainer_state(ckpt: Path) -> dict[str, Any]:
    return torch.load(Path(ckpt) / "trainer_state.pt", map_location="cpu", weights_only=False)


def remove_stale_temporaries(root: str | Path) -> None:
    """Half-written checkpoints of a killed process (hidden temporaries: `.step_*.tmp-<pid>`)."""
    root = Path(root)
    if root.is_dir():
        for p in root.glob(".step_*.tmp-*"):
            shutil.rmtree(p, ignore_errors=True)
