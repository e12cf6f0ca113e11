"""What each stage of a run reads, and so what its id is the hash of.

    sft   engine + model + task + sft                      (shared by every RL run with the same SFT settings)
    rl    engine + model + task + rl + seed + sft_id       (only the selected update rule's rl.<rule> section)
    eval  engine + task + eval + run_id                    (changing eval settings never retrains anything)

`stage_config` gives the plain dict (its canonical JSON is hashed into the stage id and travels to the stage
job on the command line); `parse_stage` turns it back into a typed, validated model on the other side, so an
engine reads `stage.rl.lr`, never a dict. Sections a stage does not read are absent from its model.
"""

from __future__ import annotations

from typing import Any

from workflow.config import (VERL_STAGE_FIELDS, EngineConfig, EvalConfig, ModelConfig, RLConfig, RunConfig,
                             SFTConfig, TaskConfig)
from workflow.strict import Strict

STAGES = ("sft", "rl", "eval")


def stage_config(cfg: RunConfig, stage: str, *, sft_id: str | None = None, run_id: str | None = None) -> dict:
    """The part of a run's config that decides a stage's result; a stage's id is the hash of exactly this."""
    d = cfg.model_dump(mode="json")
    engine = {"name": d["engine"]["name"]}  # engine.verl only for verl runs, as the rule sections below
    if engine["name"] == "verl" and stage in VERL_STAGE_FIELDS:
        engine["verl"] = {k: d["engine"]["verl"][k] for k in VERL_STAGE_FIELDS[stage]}
    elif engine["name"] == "verl":
        engine = d["engine"]
    common = {"engine": engine, "task": d["task"]}
    if stage == "sft":
        return {**common, "model": d["model"], "sft": d["sft"]}
    if stage == "rl":
        # only the selected update rule's settings belong to the run: a GRPO run is the same run whatever
        # rl.sfpo.K says, so sweeping rl.sfpo.K over GRPO runs is reported as duplicate runs
        sections = RLConfig.rule_sections()
        rl = {k: v for k, v in d["rl"].items() if k not in sections or k == d["rl"]["update"]}
        return {**common, "model": d["model"], "rl": rl, "seed": d["seed"], "sft_id": sft_id}
    if stage == "eval":
        return {**common, "eval": d["eval"], "run_id": run_id}
    raise ValueError(f"unknown stage {stage!r}; known: {', '.join(STAGES)}")


class SFTStage(Strict):
    engine: EngineConfig
    model: ModelConfig
    task: TaskConfig
    sft: SFTConfig


class RLStage(Strict):
    engine: EngineConfig
    model: ModelConfig
    task: TaskConfig
    rl: RLConfig
    seed: int
    sft_id: str | None


class EvalStage(Strict):
    engine: EngineConfig
    task: TaskConfig
    eval: EvalConfig
    run_id: str


STAGE_MODELS: dict[str, type[Strict]] = {"sft": SFTStage, "rl": RLStage, "eval": EvalStage}


def parse_stage(stage: str, cfg: dict[str, Any]) -> SFTStage | RLStage | EvalStage:
    if stage not in STAGE_MODELS:
        raise ValueError(f"unknown stage {stage!r}; known: {', '.join(STAGES)}")
    return STAGE_MODELS[stage].model_validate(cfg)
