"""What each stage of a run reads, and so what its id is the hash of.

    data     the training-set settings of a `datasets` task    (one prepared copy for every run that shares them)
    overlap  data_id + the evaluated benchmarks                (the training data vs each benchmark, a report)
    sft      engine + model + task + sft [+ data_id]           (shared by every RL run with the same SFT settings)
    rl       engine + model + task + rl + seed + sft_id [+ data_id]   (only the selected rule's rl.<rule> section)
    eval     engine + task + eval + run_id                     (changing eval settings never retrains anything)

`task` is only the selected task kind's fields (TaskConfig.read_fields); the arithmetic task has no data stage.

`stage_config` gives the plain dict (its canonical JSON is hashed into the stage id and travels to the stage
job on the command line); `parse_stage` turns it back into a typed, validated model on the other side, so an
engine reads `stage.rl.lr`, never a dict. Sections a stage does not read are absent from its model.
"""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from workflow.benchmarks.catalog import REGISTRY as BENCHMARKS
from workflow.config import EngineConfig, EvalConfig, ModelConfig, RLConfig, RunConfig, SFTConfig, TaskConfig
from workflow.engines.registry import traits
from workflow.strict import Seed, Strict

STAGES = ("data", "overlap", "sft", "rl", "eval")


def overlap_benchmarks(cfg: RunConfig) -> list[str]:
    """The evaluated benchmarks the training data is checked against (the dataset-backed ones)."""
    return [b for b in cfg.eval.benchmarks if not BENCHMARKS[b].synthetic]


def stage_config(cfg: RunConfig, stage: str, *, sft_id: str | None = None, run_id: str | None = None,
                 data_id: str | None = None) -> dict:
    """The part of a run's config that decides a stage's result; a stage's id is the hash of exactly this."""
    d = cfg.model_dump(mode="json")
    if stage == "data":
        return {"task": {k: d["task"][k] for k in TaskConfig.DATA_FIELDS}}
    if stage == "overlap":
        names = overlap_benchmarks(cfg)
        return {"data_id": data_id, "benchmarks": names,
                "paths": {b: p for b, p in d["eval"]["paths"].items() if b in names},
                "revisions": {b: r for b, r in d["eval"]["revisions"].items() if b in names}}
    if d["model"]["lora"] is None:  # full fine-tuning keeps the ids it had before LoRA existed
        del d["model"]["lora"]
    # the engine's own settings only for its runs, and only those the stage reads (as the rule sections below)
    engine = traits(cfg.engine.name).stage_settings(d["engine"], stage)
    common = {"engine": engine, "task": {k: d["task"][k] for k in cfg.task.read_fields}}
    data = {"data_id": data_id} if data_id is not None else {}  # only runs that train on prepared data
    if stage == "sft":
        return {**common, "model": d["model"], "sft": d["sft"], **data}
    if stage == "rl":
        # only the selected update rule's settings belong to the run: a GRPO run is the same run whatever
        # rl.sfpo.K says, so sweeping rl.sfpo.K over GRPO runs is reported as duplicate runs
        # (and likewise only the selected mixed-policy method's rl.<mix> section)
        rules, mixes = RLConfig.rule_sections(), RLConfig.mix_sections()
        rl = {k: v for k, v in d["rl"].items() if (k not in rules or k == d["rl"]["update"])
              and (k not in mixes or k == d["rl"]["mix"])}
        if rl["mix"] == "none":  # on-policy runs keep the ids they had before mixed-policy methods existed
            del rl["mix"]
        for part in RLConfig.fast_sections():  # FAST-GRPO's parts: in the id only when switched on
            if not rl[part]["enabled"]:
                del rl[part]
        return {**common, "model": d["model"], "rl": rl, "seed": d["seed"], "sft_id": sft_id, **data}
    if stage == "eval":
        # at_start off: the ids from before it existed; graders only rescore what was generated (rule rescore)
        ev = {k: v for k, v in d["eval"].items() if (k != "at_start" or v) and k != "graders"}
        return {**common, "eval": ev, "run_id": run_id}
    raise ValueError(f"unknown stage {stage!r}; known: {', '.join(STAGES)}")


class DataStage(Strict):
    task: TaskConfig

    @model_validator(mode="before")
    @classmethod
    def _a_datasets_task(cls, data: Any) -> Any:
        return {"task": {**data["task"], "name": "datasets"}} if isinstance(data, dict) and "task" in data else data


class OverlapStage(Strict):
    data_id: str
    benchmarks: list[str]
    paths: dict[str, str]
    revisions: dict[str, str]


class SFTStage(Strict):
    engine: EngineConfig
    model: ModelConfig
    task: TaskConfig
    sft: SFTConfig
    data_id: str | None = None


class RLStage(Strict):
    engine: EngineConfig
    model: ModelConfig
    task: TaskConfig
    rl: RLConfig
    seed: Seed
    sft_id: str | None
    data_id: str | None = None


class EvalStage(Strict):
    engine: EngineConfig
    task: TaskConfig
    eval: EvalConfig
    run_id: str


STAGE_MODELS: dict[str, type[Strict]] = {"data": DataStage, "overlap": OverlapStage, "sft": SFTStage,
                                         "rl": RLStage, "eval": EvalStage}


def parse_stage(stage: str, cfg: dict[str, Any]) -> DataStage | OverlapStage | SFTStage | RLStage | EvalStage:
    if stage not in STAGE_MODELS:
        raise ValueError(f"unknown stage {stage!r}; known: {', '.join(STAGES)}")
    return STAGE_MODELS[stage].model_validate(cfg)
