"""Checkpoints: `<dir>/step_000040/` = a Hugging Face model directory + `trainer_state.pt` + `meta.json`.

Each checkpoint is written to a temporary sibling and renamed into place, so a directory named `step_*` is always
complete: a stage killed mid-save resumes from the previous one. Old checkpoints are never deleted here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch

_STEP_DIR = re.compile(r"^step_(\d{6,})$")


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step_{step:06d}"


def list_checkpoints(root: str | Path) -> list[tuple[int, Path]]:
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and (p / "meta.json").is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(root: str | Path) -> tuple[int, Path] | None:
    ckpts = list_checkpoints(root)
    return ckpts[-1] if ckpts else None


def save_checkpoint(root: str | Path, step: int, model, trainer_state: dict[str, Any], meta: dict[str, Any]) -> Path:
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = step_dir(root, step)
    if final.exists():  # already saved by an earlier attempt that died after the rename: keep it
        return final
    tmp = root / f".{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    torch.save(trainer_state, tmp / "trainer_state.pt")
    (tmp / "meta.json").write_text(json.dumps({**meta, "step": step}, indent=1, sort_keys=True))
    os.replace(tmp, final)
    return final


def load_trainer_state(ckpt: Path) -> dict[str, Any]:
    return torch.load(Path(ckpt) / "trainer_state.pt", map_location="cpu", weights_only=False)


def read_meta(ckpt: Path) -> dict[str, Any]:
    return json.loads((Path(ckpt) / "meta.json").read_text())


def remove_stale_temporaries(root: str | Path) -> None:
    """Half-written checkpoints of a killed process (their names start with '.step_')."""
    root = Path(root)
    if root.is_dir():
        for p in root.glob(".step_*.tmp-*"):
            shutil.rmtree(p, ignore_errors=True)
