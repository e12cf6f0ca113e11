"""A toy stage, declared the way a new stage is: one `Stage` in workflow/stages.py STAGES and nothing else (no rule,
no parser, no id code). It reads the SFT job and the prepared data, exists only in runs with SFT, and its config
names both ids and the seed. tests/unit/core/test_stages.py checks what follows from the declaration."""

from __future__ import annotations

from pathlib import Path

from workflow import stages
from workflow.stages import STAGES, Option, Stage

TOY = Stage(
    "toy", "toy_id", lambda cfg, d, ids: {"sft_id": ids.sft_id, "data_id": ids.data_id, "seed": d["seed"]},
    stages.DataStage, "x:y", present=lambda cfg: cfg.sft.enabled, resources="sft", help="a toy stage",
    options=(Option("init", "the SFT job", Path, upstream="sft"), Option("data", "the data", Path, upstream="data"),
             Option("knob", "a setting", int)))


def declare() -> None:
    STAGES["toy"] = TOY
