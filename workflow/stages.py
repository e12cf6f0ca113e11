"""What each stage of a run reads, and so what its id is the hash of.

    data     the training-set settings of a `datasets` task    (one prepared copy for every run that shares them)
    overlap  data_id + the evaluated benchmarks                (the training data vs each benchmark, a report)
    pretrain engine + model + task + pretrain                  (a capable base: plain-text pretraining, when on)
    sft      engine + model + task + sft [+ data_id] [+ pretrain_id]   (shared by every RL run with its settings)
    rl       engine + model + task + rl + seed + sft_id [+ data_id] [+ pretrain_id]   (only the selected rule's
             rl.<rule> section)
    eval     engine + task + eval + run_id                     (changing eval settings never retrains anything)

`task` is only the selected task kind's fields (TaskConfig.read_fields); the arithmetic task has no data stage.

`stage_config` gives the plain dict (its canonical JSON is hashed into the stage id and travels to the stage
job on the command line); `parse_stage` turns it back into a typed, validated model on the other side, so an
engine reads `stage.rl.lr`, never a dict. Sections a stage does not read are absent from its model.

A stage is declared once, in STAGES below, in the order a run's ids are computed: when a run has it (`present`),
the run field its id fills (`id_field`), its config slice, its typed model, its runner and the options of its job's
command line (`Option`: the files of the stages it reads, and the job's own settings). From that declaration follow
a run's ids (workflow/sweep/expand.py `runs_for`), the sweep's jobs and their inputs (`Sweep.jobs`,
`Sweep.upstream`), the Snakemake rule of each stage but eval (rules/stages.smk; eval's jobs, one per
checkpoint and benchmark group, have their own rules in rules/eval.smk), the job's parser (workflow/launch.py), the
arguments a rule hands the job (workflow/job_args.py) and run_stage's keywords.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

from pydantic import model_validator

from workflow.benchmarks.catalog import REGISTRY as BENCHMARKS
from workflow.config import (EngineConfig, EvalConfig, ModelConfig, PretrainConfig, RLConfig, RunConfig, SFTConfig,
                             TaskConfig)
from workflow.engine_api.registry import traits
from workflow.segments import segment_ends
from workflow.strict import Seed, Strict

def overlap_benchmarks(cfg: RunConfig) -> list[str]:
    """The evaluated benchmarks the training data is checked against (the dataset-backed ones)."""
    return [b for b in cfg.eval.benchmarks if not BENCHMARKS[b].synthetic]


@dataclass(frozen=True)
class Ids:
    """The ids of the stages a stage depends on, which its config names (and so its own id hashes): each a
    `Stage.id_field` of an earlier stage."""
    data_id: str | None = None
    overlap_id: str | None = None
    pretrain_id: str | None = None
    sft_id: str | None = None
    run_id: str | None = None


def stage_config(cfg: RunConfig, stage: str, *, sft_id: str | None = None, run_id: str | None = None,
                 data_id: str | None = None, pretrain_id: str | None = None) -> dict:
    """The part of a run's config that decides a stage's result; a stage's id is the hash of exactly this."""
    return stage_of(stage).config(cfg, cfg.model_dump(mode="json"),
                                  Ids(data_id=data_id, sft_id=sft_id, run_id=run_id, pretrain_id=pretrain_id))


def _data_config(cfg: RunConfig, d: dict, ids: Ids) -> dict:
    return {"task": {k: d["task"][k] for k in TaskConfig.DATA_FIELDS}}


def _overlap_config(cfg: RunConfig, d: dict, ids: Ids) -> dict:
    names = overlap_benchmarks(cfg)
    return {"data_id": ids.data_id, "benchmarks": names,
            "paths": {b: p for b, p in d["eval"]["paths"].items() if b in names},
            "revisions": {b: r for b, r in d["eval"]["revisions"].items() if b in names}}


def _common(cfg: RunConfig, d: dict, stage: str) -> dict:
    """What every model stage reads: its engine (the engine's own settings only for its runs, and only those the
    stage reads) and the selected task kind's fields."""
    return {"engine": traits(cfg.engine.name).stage_settings(d["engine"], stage),
            "task": {k: d["task"][k] for k in cfg.task.read_fields}}


def _model(d: dict) -> dict:
    model = dict(d["model"])
    if model["lora"] is None:  # full fine-tuning keeps the ids it had before LoRA existed
        del model["lora"]
    return model


def _data_ref(ids: Ids) -> dict:
    return {"data_id": ids.data_id} if ids.data_id is not None else {}  # only runs that train on prepared data


def _base_ref(ids: Ids) -> dict:
    # only runs from a pretrained base name one: the others keep the ids they had before the pretrain stage existed
    return {"pretrain_id": ids.pretrain_id} if ids.pretrain_id is not None else {}


def _pretrain_config(cfg: RunConfig, d: dict, ids: Ids) -> dict:
    return {**_common(cfg, d, "pretrain"), "model": _model(d), "pretrain": d["pretrain"]}


def _sft_config(cfg: RunConfig, d: dict, ids: Ids) -> dict:
    return {**_common(cfg, d, "sft"), "model": _model(d), "sft": d["sft"], **_data_ref(ids), **_base_ref(ids)}


def _rl_config(cfg: RunConfig, d: dict, ids: Ids) -> dict:
    # only the selected update rule's settings belong to the run: a GRPO run is the same run whatever
    # rl.sfpo.K says, so sweeping rl.sfpo.K over GRPO runs is reported as duplicate runs
    # (and likewise only the selected mixed-policy method's rl.<mix> section)
    rules, mixes = RLConfig.rule_sections(), RLConfig.mix_sections()
    rl = {k: v for k, v in d["rl"].items() if (k not in rules or k == d["rl"]["update"])
          and (k not in mixes or k == d["rl"]["mix"])}
    if rl["mix"] == "none":  # on-policy runs keep the ids they had before mixed-policy methods existed
        del rl["mix"]
    if rl["warmup_steps"] == 0:  # and runs without warm-up the ids they had before rl.warmup_steps existed
        del rl["warmup_steps"]
    del rl["segment_steps"]  # how the run is split into jobs, not what it trains (workflow/segments.py)
    for part in RLConfig.fast_sections():  # FAST-GRPO's parts: in the id only when switched on
        if not rl[part]["enabled"]:
            del rl[part]
    return {**_common(cfg, d, "rl"), "model": _model(d), "rl": rl, "seed": d["seed"], "sft_id": ids.sft_id,
            **_data_ref(ids), **_base_ref(ids)}


def _eval_config(cfg: RunConfig, d: dict, ids: Ids) -> dict:
    # at_start off: the ids from before it existed; graders only rescore what was generated (rule rescore)
    ev = {k: v for k, v in d["eval"].items() if (k != "at_start" or v) and k != "graders"}
    return {**_common(cfg, d, "eval"), "eval": ev, "run_id": ids.run_id}


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


class PretrainStage(Strict):
    engine: EngineConfig
    model: ModelConfig
    task: TaskConfig
    pretrain: PretrainConfig


class SFTStage(Strict):
    engine: EngineConfig
    model: ModelConfig
    task: TaskConfig
    sft: SFTConfig
    data_id: str | None = None
    pretrain_id: str | None = None


class RLStage(Strict):
    engine: EngineConfig
    model: ModelConfig
    task: TaskConfig
    rl: RLConfig
    seed: Seed
    sft_id: str | None
    data_id: str | None = None
    pretrain_id: str | None = None


class EvalStage(Strict):
    engine: EngineConfig
    task: TaskConfig
    eval: EvalConfig
    run_id: str


@dataclass(frozen=True)
class Option:
    """One option of a stage job's command line (`scripts/stage.py STAGE --flag VALUE`), declared with its stage.
    `name` is run_stage's keyword (workflow/launch.py) and, for a file of another stage, the name of the rule's
    input that holds it."""
    name: str
    help: str
    type: Callable[[str], Any] = str
    many: bool = False  # several values (the overlap checks of a training stage)
    upstream: str | None = None  # the DONE.json of a job of this stage: what the Snakemake rule waits for

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


# what a training stage of a `datasets` task reads besides its config: the prepared rows and their overlap checks
TRAINING_DATA = (
    Option("data", "DONE.json of the data stage (datasets tasks)", Path, upstream="data"),
    Option("overlap", "DONE.json of the overlap checks to enforce", Path, many=True, upstream="overlap"),
    Option("max_train_overlap", "refuse to train above this benchmark overlap (checks.max_train_overlap)", float),
)
LABEL = Option("label", "the run's label in its sweep: its grid point without the seed")
BASE = Option("base", "DONE.json of the pretrain stage: the capable base it starts from", Path, upstream="pretrain")


def _always(cfg: RunConfig) -> bool:
    return True


def _has_data(cfg: RunConfig) -> bool:
    return cfg.task.name == "datasets"


def _has_overlap(cfg: RunConfig) -> bool:
    return _has_data(cfg) and bool(overlap_benchmarks(cfg))


def _has_sft(cfg: RunConfig) -> bool:
    return cfg.sft.enabled


def _has_pretrain(cfg: RunConfig) -> bool:
    return cfg.pretrain.enabled


@dataclass(frozen=True)
class Stage:
    """One kind of stage: when a run has one (`present`), the field of the run (and of `Ids`) its id fills
    (`id_field`), the slice of the run config its id hashes (`config`), the typed model its job reads that slice back
    into (`model`), the function that runs one job of it (`runner`, "module:function" in workflow/launch.py, imported
    by the job only: planning a sweep imports no torch), its job's options besides the ones every job takes
    (--sweep, --id, --config, --results, --threads, --wait-for-twin), and the `resources:` block of a sweep its jobs
    take their threads, time and GPUs from."""
    name: str
    id_field: str
    config: Callable[[RunConfig, dict, Ids], dict]
    model: type[Strict]
    runner: str
    options: tuple[Option, ...] = ()
    help: str = ""  # one line: what a job of it does (`scripts/stage.py --help`)
    present: Callable[[RunConfig], bool] = _always
    resources: str = ""  # default: the stage's name
    # its Snakemake rule is made from this declaration (rules/stages.smk); False: eval, whose jobs (one per checkpoint
    # step and benchmark group, step 0 shared) have rules of their own (rules/eval.smk)
    rule_from_declaration: bool = True
    # a stage trained as a chain of segment jobs: the steps its jobs end at (workflow/segments.py); its jobs take
    # --until (the end) and --after (the segment before), and write DONE_<end>.json
    segments: Callable[[RunConfig], list[int]] | None = None

    @property
    def resources_key(self) -> str:
        return self.resources or self.name

    @property
    def labelled(self) -> bool:
        """A job of it is one run's (the run's label is an option): the sweep records it under that label."""
        return "label" in self.by_name

    @property
    def upstream(self) -> tuple[Option, ...]:
        """The options that name a file of another stage's job: what the rule waits for."""
        return tuple(o for o in self.options if o.upstream is not None)

    @cached_property
    def by_name(self) -> dict[str, Option]:
        return {o.name: o for o in self.options}

    def option(self, name: str) -> Option:
        found = self.by_name.get(name)
        if found is None:
            raise ValueError(f"stage {self.name} has no option {name!r}; its options: "
                             f"{', '.join(o.name for o in self.options) or 'none'} (workflow/stages.py STAGES)")
        return found


STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("data", "data_id", _data_config, DataStage, "workflow.launch:run_data", present=_has_data,
          help="prepare a datasets task's training rows once"),
    Stage("overlap", "overlap_id", _overlap_config, OverlapStage, "workflow.launch:run_overlap",
          options=TRAINING_DATA[:1], present=_has_overlap, resources="data",
          help="check the prepared rows against the evaluated benchmarks"),
    Stage("pretrain", "pretrain_id", _pretrain_config, PretrainStage, "workflow.launch:run_training",
          present=_has_pretrain, resources="sft", help="pretrain a capable base on plain text (config.pretrain)"),
    Stage("sft", "sft_id", _sft_config, SFTStage, "workflow.launch:run_training", options=(*TRAINING_DATA, BASE),
          present=_has_sft, help="supervised fine-tuning to its final checkpoint"),
    Stage("rl", "run_id", _rl_config, RLStage, "workflow.launch:run_training", help="RL from the SFT checkpoint (or "
          "the engine's start model) to its final checkpoint, or one segment of it", segments=segment_ends, options=(
              Option("init", "DONE.json of the SFT stage it starts from", Path, upstream="sft"),
              BASE, *TRAINING_DATA, LABEL,
              Option("until", "a segment: train up to this step, checkpoint and stop (default: rl.steps)", int),
              Option("after", "a segment after the first: the DONE_<step>.json of the one before", Path))),
    Stage("eval", "eval_id", _eval_config, EvalStage, "workflow.launch:run_evaluation", rule_from_declaration=False,
          help="sample and score one checkpoint of an RL run on one benchmark group", options=(
              Option("checkpoint_from", "DONE.json (or DONE_<step>.json of a segment) of the RL stage to evaluate "
                     "(step 0: or the SFT stage's DONE.json)", Path, upstream="rl"),
              Option("start_model", "step 0 of an RL run without SFT: the model it starts from (verl's model_path)"),
              Option("copy_from", "step 0: DONE.json of another run's evaluation of the same start, whose rows "
                     "this job copies", Path, upstream="eval"),
              Option("step", "the RL checkpoint step (default: the final one)", int),
              Option("group", "the benchmark group (default: all benchmarks)"),
              LABEL)),
)}


def stage_of(name: str) -> Stage:
    try:
        return STAGES[name]
    except KeyError:
        raise ValueError(f"unknown stage {name!r}; known: {', '.join(STAGES)}") from None


def parse_stage(stage: str, cfg: dict[str, Any]) -> (DataStage | OverlapStage | PretrainStage | SFTStage | RLStage
                                                     | EvalStage):
    """A stage job's config (stage_config's dict, from its command line) as the typed model it reads."""
    return stage_of(stage).model.model_validate(cfg)
