"""The run configuration: one validated, fully-resolved description of an SFT -> RL -> eval run.

A sweep file's `base` block plus one grid point is validated into a `RunConfig`. Every field has a default so a
sweep only states what it changes; unknown keys are rejected (`extra="forbid"`) so a typo never silently falls
back to a default. Each stage sees only the part of the config that decides its result (workflow/stages.py),
which is what its id is hashed from.
"""

from __future__ import annotations

import functools

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, create_model,
                      field_validator, model_validator)

from workflow.benchmarks.catalog import REGISTRY as BENCHMARKS
from workflow.benchmarks.graders import GRADERS
from workflow.data.sources import REGISTRY as TRAINING_SETS
from workflow.engine_api.registry import ENGINES, traits
from workflow.hub import record_file_problem
from workflow.methods import registry as methods
from workflow.methods.base import Method
from workflow.methods.registry import METHODS
from workflow.models import check_name as check_model_name
from workflow.strict import ConfigProblem, Seed, Strict


def section(model: type, description: str):
    """A section of the run config whose default is its model's own defaults, built fresh for each validation:
    pydantic deep-copies a default instance on every validation, ~30 us a run of what a 10,000-run sweep spends
    loading (issue 64); the JSON Schema still shows the default (sweep.schema.json)."""
    def schema_default(schema: dict) -> None:
        schema["default"] = model().model_dump(mode="json")
    return Field(default_factory=model, description=description, json_schema_extra=schema_default)


class VerlSettings(Strict):
    """How a run uses verl (engine.name = verl); only then part of the run ids. See
    workflow/engines/verl/job/translate.py for how the rest of the run config maps onto verl's."""

    model_path: str | None = Field(None, description=(
        "The Hugging Face model (id or directory) SFT starts from, or RL when sft is off; or a built-in model "
        "(workflow/models.py: rlsweep:tiny, rlsweep:smollm2-135m)."))
    device: Literal["cuda", "cpu"] = Field("cuda", description=(
        "Where verl runs: cuda (GPU nodes) or cpu (verl + vLLM's CPU build on small models: the whole chain on a "
        "laptop, a login node or CI; workflow/engines/verl/compat/cpu.py)."))
    n_gpus_per_node: PositiveInt = Field(1, description="GPUs per node a verl job uses (data-parallel ranks per node).")
    nnodes: PositiveInt = Field(1, description=(
        "Nodes a verl job spans (a Ray cluster across the SLURM allocation's nodes)."))
    strategy: Literal["fsdp2", "fsdp"] = Field("fsdp2", description=(
        "verl's training backend: FSDP2 (verl's default) or FSDP."))
    rollout_tp: PositiveInt = Field(1, description=(
        "vLLM tensor-parallel size of the rollout engine; must divide the run's GPUs."))
    gpu_memory_utilization: float = Field(0.6, gt=0.0, le=1.0, description=(
        "vLLM's share of each GPU's memory for the rollout engine."))
    max_prompt_length: PositiveInt = Field(1024, description=(
        "Longest prompt in tokens verl accepts (its data.max_prompt_length); longer prompts are filtered out."))
    overrides: dict[str, Any] = Field({}, description=(
        "Raw keys of verl's PPO trainer config, dotted (e.g. actor_rollout_ref.actor.ppo_epochs: 2); applied last, "
        "checked by verl's own validation when the sweep loads."))
    timeout_min: PositiveInt | None = Field(None, description=(
        "Kill a verl trainer that runs longer than this many minutes (a failing vLLM worker can hang instead of "
        "failing); null: only the cluster's time limit. Not part of any id."))
    sft_overrides: dict[str, Any] = Field({}, description=(
        "Raw keys of verl's SFT trainer config (sft_trainer_engine.yaml), dotted; applied last."))

    @field_validator("model_path")
    @classmethod
    def _builtin_known(cls, v: str | None) -> str | None:
        try:
            check_model_name(v or "")  # a `rlsweep:` name must be a built-in model (workflow/models.py)
        except ValueError as e:
            raise ConfigProblem("", str(e)) from None
        return v


class EngineConfig(Strict):
    """Which engine trains and samples. `local`: pure torch on CPU or one GPU, tiny random-init models. `verl`:
    verl 0.9 on GPU nodes: SFT with verl's SFT trainer (torchrun, FSDP), RL with verl's PPO trainer (Ray, FSDP2,
    vLLM rollouts) running our update rules."""

    name: str = Field("local", description=(
        "The engine that trains and samples: local (pure torch, CPU or one GPU) or verl (Ray, FSDP2, vLLM), or one a "
        "plug-in registers (workflow/engine_api/registry.py)."))
    verl: VerlSettings = section(VerlSettings, (
        "How the run uses verl; read only when name is verl, and then part of the run ids."))

    @field_validator("name")
    @classmethod
    def _registered(cls, v: str) -> str:
        if v not in ENGINES:
            raise ConfigProblem("", ENGINES.unknown(v))
        return v


class LoRAConfig(Strict):
    """Low-rank adapters (Hu et al., arXiv:2106.09685) on `target_modules` of every layer: W x + (alpha / rank) B A x,
    A random, B zero at the start, only A and B trained (the update rules' extra state is adapter-sized). peft's
    LoraConfig on the local engine (workflow/engines/lora.py), verl's own LoRA settings on verl (translate.lora_keys:
    vLLM rollouts get the merged policy). Checkpoints hold the adapter and the merged model (what evaluation loads)."""

    rank: PositiveInt = Field(8, description="The adapters' rank r (A is r x in, B is out x r).")
    alpha: PositiveFloat = Field(16.0, description="The adapters' scale numerator: the update is (alpha / rank) B A x.")
    target_modules: tuple[str, ...] = Field(("q_proj", "k_proj", "v_proj", "o_proj"), description=(
        "Module names the adapters go on (the last part of a module's path, as peft matches them): by default the "
        "attention projections, as the GXPO paper's LoRA runs; add gate_proj, up_proj, down_proj for the MLP."))
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapters' input during training.")

    @field_validator("target_modules")
    @classmethod
    def _some_modules(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v or len(set(v)) != len(v) or not all(v):
            raise ValueError("name at least one module, each once")
        return v


class ModelConfig(Strict):
    """A tiny random-init causal LM built from a transformers config (no weights are downloaded), optionally trained
    through LoRA adapters (`lora`; part of the run ids only when set)."""

    arch: Literal["qwen2"] = Field("qwen2", description=(
        "The transformers architecture of the local engine's random-init model."))
    n_layers: PositiveInt = Field(2, description="Transformer layers of the local model.")
    hidden: PositiveInt = Field(64, description="Hidden size of the local model (a multiple of n_heads).")
    n_heads: PositiveInt = Field(4, description="Attention heads of the local model.")
    mlp_ratio: PositiveInt = Field(3, description="The MLP's intermediate size as a multiple of hidden.")
    max_positions: PositiveInt = Field(128, description=(
        "Longest sequence (prompt + response, in tokens) the local model handles."))
    lora: LoRAConfig | None = Field(None, description=(
        "Train through low-rank adapters instead of every weight; null (the default): full fine-tuning. Part of the "
        "run ids only when set."))

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> "ModelConfig":
        if self.hidden % self.n_heads:
            raise ConfigProblem("hidden", f"{self.hidden} must be divisible by n_heads ({self.n_heads})")
        return self


class DataSource(Strict):
    """One training set of a `datasets` task (workflow/data/sources.py) and how much of it to take."""

    name: str = Field(description="A registered training set (workflow/data/sources.py).")
    weight: PositiveFloat = Field(1.0, description=(
        "Rows taken: round(weight x the set's rows after filtering and de-duplication); below 1 subsamples, above 1 "
        "repeats."))
    path: str | None = Field(None, description=(
        "A local .jsonl or .parquet file in the set's own fields (else the Hugging Face cache); generated sets take "
        "none."))
    revision: str | None = Field(None, description="A pinned dataset revision on the Hugging Face Hub.")

    @field_validator("name")
    @classmethod
    def _registered(cls, v: str) -> str:
        if v not in TRAINING_SETS:
            raise ValueError(TRAINING_SETS.unknown(v))
        return v

    @model_validator(mode="after")
    def _generated_sets_have_no_file(self) -> "DataSource":
        if self.path is not None and TRAINING_SETS[self.name].synthetic:
            raise ConfigProblem("path", f"training set {self.name} is generated, not read from a file: drop `path`")
        return self


class TaskConfig(Strict):
    """What a run trains on.

    arithmetic  synthetic arithmetic with \\boxed{} answers (the local engine's task); the train / held-out split
                depends on `split_seed` only.
    datasets    real training sets (one, or a weighted mixture), prepared once by the data stage: prompts for RL,
                the sets' own demonstrations for SFT, rewards by the eval scorer (boxed answer + math-verify).
    Only the selected kind's fields are part of a run's identity (`read_fields`)."""

    name: Literal["arithmetic", "datasets"] = Field("arithmetic", description=(
        "What the run trains on: arithmetic (synthetic, generated) or datasets (real training sets prepared by the "
        "data stage)."))
    split_seed: Seed = Field(1234, description=(
        "arithmetic: the seed of the train / held-out split (nothing else decides it)."))
    n_heldout: PositiveInt = Field(256, description="arithmetic: problems held out for evaluation.")
    two_step_fraction: float = Field(0.5, ge=0.0, le=1.0, description=(
        "arithmetic: the share of two-operation problems (the rest take one)."))
    datasets: tuple[DataSource, ...] = Field((), description="datasets: the training sets, one or a weighted mixture.")
    template: Literal["boxed", "seed003"] = Field("boxed", description=(
        "How a training prompt is put to the model (workflow/benchmarks/prompts.py): boxed (answer in \\boxed{}) or "
        "seed003."))
    max_prompt_chars: PositiveInt | None = Field(None, description=(
        "datasets: drop problems longer than this many characters."))
    max_solution_chars: PositiveInt | None = Field(None, description=(
        "datasets: drop demonstrations longer than this many characters (SFT data)."))
    limit: PositiveInt | None = Field(None, description=(
        "datasets: at most this many rows after the mixture (a random subset drawn with `seed`)."))
    seed: Seed = Field(0, description="datasets: the seed of the mixture's sampling and order.")

    ARITHMETIC_FIELDS: ClassVar[tuple[str, ...]] = ("name", "split_seed", "n_heldout", "two_step_fraction")
    DATA_FIELDS: ClassVar[tuple[str, ...]] = ("datasets", "max_prompt_chars", "max_solution_chars", "limit", "seed")

    @property
    def read_fields(self) -> tuple[str, ...]:
        return self.ARITHMETIC_FIELDS if self.name == "arithmetic" else ("name", "template", *self.DATA_FIELDS)

    @model_validator(mode="after")
    def _datasets_for_datasets(self) -> "TaskConfig":
        if self.name == "datasets" and not self.datasets:
            raise ValueError("task.datasets: name at least one training set (task.name is datasets)")
        if self.name == "arithmetic" and self.datasets:
            raise ValueError("task.datasets: read only when task.name is datasets (it is arithmetic)")
        return self


class SupervisedOptimizer(Strict):
    """The AdamW settings the supervised stages share (SFT and pretraining): warm-up, decay floor, weight decay,
    clipping."""

    warmup_ratio: float = Field(0.1, ge=0.0, lt=1.0, description=(
        "Share of the steps with a linear learning-rate warm-up."))
    min_lr_ratio: float = Field(0.1, ge=0.0, le=1.0, description="Where the cosine schedule ends, as a fraction of lr.")
    weight_decay: NonNegativeFloat = Field(0.01, description="AdamW's decoupled weight decay.")
    max_grad_norm: PositiveFloat | None = Field(1.0, description=(
        "Clip the gradient's global norm to this; null: no clipping."))


class SFTConfig(SupervisedOptimizer):
    """Supervised fine-tuning on worked solutions, loss on answer tokens only, global token-mean."""

    enabled: bool = Field(True, description=(
        "Run supervised fine-tuning before RL; false: RL starts from the model itself."))
    seed: Seed = Field(0, description="The SFT seed (separate from the run's RL seed, so RL seeds share one SFT job).")
    steps: PositiveInt = Field(300, description="Optimizer steps.")
    batch_size: PositiveInt = Field(128, description="Examples per optimizer step.")
    micro_batch_size: PositiveInt | None = Field(None, description=(
        "Examples per forward pass (gradient accumulation over the batch); null: the whole batch at once. The loss is "
        "the batch's global token mean whatever the split."))
    lr: PositiveFloat = Field(3e-3, description="Peak learning rate (AdamW).")
    schedule: Literal["cosine", "constant"] = Field("cosine", description=(
        "Learning-rate schedule after warm-up: cosine decay to min_lr_ratio x lr, or constant."))
    checkpoint_every: PositiveInt = Field(100, description=(
        "Save a checkpoint (and flush train_steps rows) every this many steps; the last step always saves."))


class PretrainConfig(SupervisedOptimizer):
    """A capable base at demo scale: a plain language-model objective on arithmetic text before anything else
    trains, as a math-pretrained base has seen mathematics and questions answered, but rarely the answer format the
    task rewards (\\boxed{}): it answers the task's questions, mostly in the wrong format (docs/demo.md, "Two
    regimes"). Local engine only: verl starts from its model_path. Part of the ids only when on."""

    enabled: bool = Field(False, description=(
        "Pretrain the model on plain arithmetic text first; SFT (or RL without SFT) then starts from that base "
        "instead of a random initialisation. false (the default): the random-init model."))
    corpus: Literal["arithmetic"] = Field("arithmetic", description=(
        "The text: arithmetic: the task's training problems as short plain-text documents, each solved (the "
        "held-out problems never appear): an equation `37+48=85`, or the shares below of two other styles."))
    qa_fraction: float = Field(0.3, ge=0.0, le=1.0, description=(
        "The share of documents written as the task's question and its plain answer, `Q:37+48=?A:85`: no "
        "\\boxed{}, so the base answers in the wrong format. (Without any, this character-level model has never "
        "seen the question's template and answers it with noise.)"))
    boxed_fraction: float = Field(0.05, ge=0.0, le=1.0, description=(
        "The share of documents whose answer is in LaTeX's box, `37+48=\\boxed{85}`, as math text sometimes "
        "writes it: the base has seen the format, rarely, and never after the task's question."))
    seed: Seed = Field(0, description="The pretraining seed: the model's initialisation and the text's order.")
    steps: PositiveInt = Field(1500, description="Optimizer steps.")
    batch_size: PositiveInt = Field(64, description="Documents per optimizer step.")
    lr: PositiveFloat = Field(3e-3, description="Peak learning rate (AdamW, warm-up then cosine decay).")
    checkpoint_every: PositiveInt = Field(500, description=(
        "Save a checkpoint (and flush train_steps rows) every this many steps; the last step always saves."))

    @model_validator(mode="after")
    def _shares_fit(self) -> "PretrainConfig":
        if self.qa_fraction + self.boxed_fraction > 1:
            raise ConfigProblem("qa_fraction", f"{self.qa_fraction} + boxed_fraction "
                                f"{self.boxed_fraction} is more than every document")
        return self


class RLBase(Strict):
    """GRPO and its common variants (DAPO clip-higher, Dr.GRPO no-std / token-sum), on-policy, with the policy
    update done by an update rule (rl.update), optionally a mixed-policy method (rl.mix) and FAST-GRPO's parts. The
    methods' own sections (rl.sfpo, rl.luffy, rl.slow2fast, ...) come from their cards (workflow/methods/): RLConfig
    below is this model plus one section per registered method with settings."""

    update: str = Field("grpo", description=(
        "The update rule (workflow/methods/): how a step turns the loss into parameter updates: grpo, sfpo, gxpo, or a"
        " registered plug-in."))
    mix: str = Field("none", description=(
        "The mixed-policy method (workflow/methods/): none (on-policy), luffy, srft, hpt, relift, prefix_rft."))
    steps: PositiveInt = Field(40, description="RL steps (each: sample, score, update).")
    prompts_per_step: PositiveInt = Field(32, description="Prompts sampled per step.")
    group_size: int = Field(8, ge=2, description=(
        "Responses sampled per prompt (G); advantages are normalised within each group."))
    temperature: PositiveFloat = Field(1.0, description="Sampling temperature of the rollouts.")
    max_new_tokens: PositiveInt = Field(24, description="Longest response in tokens.")
    micro_batch_size: PositiveInt | None = Field(None, description=(
        "Sequences per forward pass; null: all of a step's sequences at once. The loss aggregates over the whole step "
        "whatever the split."))
    lr: PositiveFloat = Field(1e-4, description="Learning rate (AdamW), constant after warm-up.")
    warmup_steps: NonNegativeInt = Field(0, description=(
        "Linear learning-rate warm-up over the first steps. AdamW's first steps move every weight by about lr whatever"
        " its gradient (no second-moment history yet), so a fresh optimizer at full lr first undoes part of what SFT "
        "taught; a few steps of warm-up let it learn each weight's gradient scale first."))
    weight_decay: NonNegativeFloat = Field(0.0, description="AdamW's decoupled weight decay.")
    max_grad_norm: PositiveFloat | None = Field(1.0, description=(
        "Clip the gradient's global norm to this; null: no clipping."))
    clip_low: float = Field(0.2, gt=0.0, lt=1.0, description=(
        "PPO clip range below 1: the ratio is clipped at 1 - clip_low."))
    clip_high: PositiveFloat = Field(0.28, description=(
        "PPO clip range above 1: the ratio is clipped at 1 + clip_high (DAPO's clip-higher when above clip_low)."))
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "token-sum"] = Field("token-mean", description=(
        "How token losses aggregate: token-mean over the step (DAPO), seq-mean-token-mean (GRPO's original), or token-"
        "sum (Dr.GRPO)."))
    std_norm: bool = Field(True, description=(
        "Divide advantages by the group's standard deviation (false: Dr.GRPO's unnormalised advantages)."))
    kl_coef: NonNegativeFloat = Field(0.0, description=(
        "Weight of a KL penalty to the reference (initial) policy; 0: none, and no reference model is kept."))
    checkpoint_every: PositiveInt = Field(10, description=(
        "Save a checkpoint (and flush train_steps rows) every this many steps; evaluations read these checkpoints."))
    segment_steps: NonNegativeInt | None = Field(None, description=(
        "Train the run as a chain of jobs of this many steps, each resuming where the one before stopped, so the "
        "evaluation of a step runs while the next segment trains and each job fits a cluster's time limit "
        "(resources.rl.time is per segment); a segment also ends at every evaluated step. null: eval.every (one job "
        "when there is none); 0: one job for the whole run. Never part of the run's id: the chain trains what one job "
        "would (workflow/segments.py). On the verl engine null means one job (each job starts Ray and vLLM); a number "
        "splits the run, each segment resuming from verl's own checkpoint."))

    @field_validator("update", "mix")
    @classmethod
    def _registered(cls, v: str, info) -> str:
        """A method of the registry (workflow/methods/registry.py) with the field's role; listed without torch."""
        role = "update" if info.field_name == "update" else "mix"
        if v not in METHODS or METHODS.get(v).role != role:
            raise ConfigProblem("", methods.unknown(v, role))
        return v

    @model_validator(mode="after")
    def _selected_methods_fit(self) -> "RLBase":
        """Each selected method's own check against the rest of the RL config; parts train on the policy's own
        groups, so they do not compose with a mixed-policy method."""
        parts = self.fast_grpo_parts
        if parts and self.mix != "none":
            raise ConfigProblem(f"{parts[0]}.enabled", f"FAST-GRPO's parts train on the policy's own groups; they "
                                f"do not compose with a mixed-policy method (rl.mix {self.mix})")
        for name in (self.update, self.mix, *parts):
            settings = getattr(self, name, None)
            if settings is not None:
                settings.check(self)
        return self

    @property
    def fast_grpo_parts(self) -> list[str]:
        """The parts switched on (rl.thinking_reward, rl.dynamic_kl, rl.slow2fast, ...)."""
        return [name for name in self.fast_sections() if getattr(self, name).enabled]

    @property
    def selected(self) -> list[Method]:
        """The cards of the methods this run uses: its update rule, its mixed-policy method, the parts switched on."""
        return [METHODS.get(name) for name in (self.update, self.mix, *self.fast_grpo_parts)]

    @property
    def uses_reference(self) -> bool:
        """Whether the step needs the reference policy's log-probs (a KL penalty)."""
        return self.kl_coef > 0 or any(m.uses_reference for m in self.selected)

    @property
    def method(self) -> str:
        """What `runs.method` calls this run: the update rule, or the mixed-policy method (+ its rule if not GRPO),
        + the FAST-GRPO parts switched on (e.g. grpo+thinking_reward+slow2fast)."""
        if self.mix == "none":
            base = self.update
        else:
            base = self.mix if self.update == "grpo" else f"{self.mix}+{self.update}"
        return "+".join([base, *self.fast_grpo_parts])

    @classmethod
    def rule_sections(cls) -> tuple[str, ...]:
        """The names of the rule settings sections (`rl.sfpo`, `rl.gxpo`, ...), each read only by its own rule."""
        return cls._sections("update")

    @classmethod
    def mix_sections(cls) -> tuple[str, ...]:
        """The names of the mixed-policy settings sections (`rl.luffy`, ...), each read only by its own method."""
        return cls._sections("mix")

    @classmethod
    def fast_sections(cls) -> tuple[str, ...]:
        """The parts' sections, each part of a run's identity only when enabled."""
        return cls._sections("part")

    @classmethod
    @functools.cache  # (fixed per class; asked per run and refresh by `method`)
    def _sections(cls, role: str) -> tuple[str, ...]:
        return tuple(name for name in cls.model_fields if name in _SECTIONS and _SECTIONS[name].role == role)


def _summary(settings: type) -> str:
    """A method's section's description: its settings model's docstring, up to its first blank line."""
    return " ".join((settings.__doc__ or "").split("\n\n")[0].split())


# One section rl.<name> per registered method with settings, its default the settings' defaults. A method's section
# is part of a run's identity only while the method is selected (workflow/stages.py).
_SECTIONS: dict[str, Method] = {name: card for name, card in methods.in_order() if card.settings is not None}
RLConfig = create_model("RLConfig", __base__=RLBase, __module__=__name__, __doc__=RLBase.__doc__,
                        **{name: (card.settings, Field(card.settings(), description=_summary(card.settings)))
                           for name, card in _SECTIONS.items()})


class EvalConfig(Strict):
    """Evaluation: k samples per problem at temperature T (0 = greedy) on each benchmark of the list.

    Benchmarks are names from workflow/benchmarks/catalog.py (math500, aime24, aime25, amc23, amc83, minerva,
    olympiadbench, gsm8k, arc_c, gpqa_diamond, mmlu_pro, and `arithmetic`, the synthetic held-out set)."""

    benchmarks: list[str] = Field(["arithmetic"], description=(
        "Benchmarks to evaluate on (workflow/benchmarks/catalog.py): math500, aime24, aime25, amc23, amc83, minerva, "
        "olympiadbench, gsm8k, arc_c, gpqa_diamond, mmlu_pro, arithmetic."))
    paths: dict[str, str] = Field({}, description=(
        "Benchmark -> a local .jsonl or .parquet file in the dataset's own schema (else the Hugging Face cache)."))
    revisions: dict[str, str] = Field({}, description="Benchmark -> a pinned dataset revision on the Hugging Face Hub.")
    n_problems: PositiveInt | None = Field(None, description=(
        "Evaluate the first this many problems of each benchmark; null: every problem."))
    k: PositiveInt = Field(8, description="Samples per problem (avg@k and pass@k).")
    temperature: NonNegativeFloat = Field(0.6, description="Sampling temperature (0: greedy).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling's probability mass.")
    max_new_tokens: PositiveInt = Field(32, description="Longest response in tokens.")
    template: Literal["boxed", "seed003"] = Field("boxed", description=(
        "How a problem is put to the model (workflow/benchmarks/prompts.py); a tokenizer's own chat template wraps it when "
        "there is one."))
    backend: Literal["auto", "vllm", "local"] = Field("auto", description=(
        "What generates: vllm, local (transformers), or auto (vLLM where it is installed and the run is on verl)."))
    tensor_parallel_size: PositiveInt = Field(1, description="vLLM tensor-parallel size for evaluation.")
    verify_timeout_s: PositiveFloat = Field(10.0, description=(
        "Time limit per math-verify comparison; a timeout scores wrong."))
    bootstrap: PositiveInt = Field(1000, description="Bootstrap resamples for the reports' 95% intervals.")
    every: PositiveInt | None = Field(None, description=(
        "Also evaluate every this many RL steps (a multiple of rl.checkpoint_every); null: only the final checkpoint."))
    at_start: bool = Field(False, description=(
        "Also evaluate the model RL starts from (step 0: the SFT checkpoint, or the model itself without SFT)."))
    seed: Seed = Field(0, description="The evaluation's sampling seed.")
    graders: list[str] | Literal["all"] = Field([], description=(
        "Graders that judge the stored responses again, beside each benchmark's own (workflow/benchmarks/graders.py; "
        "table eval_grades), or `all`: every grader known (plug-ins' included); scoring only, so not part of the "
        "eval id: adding one generates nothing."))

    @field_validator("graders")
    @classmethod
    def _known_graders(cls, names: list[str] | str) -> list[str]:
        if names == "all":
            return list(GRADERS)
        unknown = [g for g in names if g not in GRADERS]
        if unknown:
            raise ValueError(f"unknown grader(s) {unknown}; known: {', '.join(GRADERS)}")
        if len(set(names)) != len(names):
            raise ValueError("graders must be a list without repeats")
        return names

    @model_validator(mode="after")
    def _known_benchmarks(self) -> "EvalConfig":
        unknown = [b for b in [*self.benchmarks, *self.paths, *self.revisions] if b not in BENCHMARKS]
        if unknown:
            raise ValueError(f"unknown benchmark(s) {unknown}; known: {', '.join(sorted(BENCHMARKS))}")
        for where, names in (("eval.paths", self.paths), ("eval.revisions", self.revisions)):
            generated = [b for b in names if BENCHMARKS[b].synthetic]
            if generated:
                raise ValueError(f"{where}: {generated} are generated (from the run's task settings or fixed), not "
                                 "read from a dataset")
        if not self.benchmarks or len(set(self.benchmarks)) != len(self.benchmarks):
            raise ValueError("benchmarks must be a non-empty list without repeats")
        return self


class RunConfig(Strict):
    engine: EngineConfig = section(EngineConfig, "Which engine trains and samples, and its settings.")
    model: ModelConfig = section(ModelConfig, (
        "The local engine's model (a tiny random-init transformer), and LoRA for either engine."))
    task: TaskConfig = section(TaskConfig, "What the run trains on.")
    pretrain: PretrainConfig = section(PretrainConfig, (
        "A capable base: plain-text pretraining of the local model before SFT and RL (off by default)."))
    sft: SFTConfig = section(SFTConfig, "Supervised fine-tuning before RL.")
    rl: RLConfig = section(RLConfig, (
        "Reinforcement learning: GRPO and its variants, the update rule, a mixed-policy method, FAST-GRPO's parts."))
    eval: EvalConfig = section(EvalConfig, "Evaluation of the RL checkpoints.")
    seed: Seed = Field(0, description=(
        "The RL seed (varied by the sweep's top-level `seeds:`); the SFT seed is sft.seed so RL seeds can share one "
        "SFT job."))

    @model_validator(mode="after")
    def _the_engine_can_run_it(self) -> "RunConfig":
        engine = traits(self.engine.name)
        if self.model.lora is not None and not engine.lora:  # what its traits declare it lacks (docs/engines.md)
            raise ConfigProblem("model.lora", f"engine {self.engine.name} has no LoRA: "
                                f"{engine.lacks.get('lora', 'not built')}")
        for method in self.rl.selected:
            if method.name in engine.lacks_methods:
                key = {"update": "rl.update", "mix": "rl.mix"}.get(method.role, f"rl.{method.name}.enabled")
                raise ConfigProblem(key, f"{method.name}: engine {self.engine.name} cannot train it: "
                                    f"{engine.lacks_methods[method.name]}")
        engine.check(self)  # each engine's own limits (workflow/engine_api/traits.py)
        return self

    @model_validator(mode="after")
    def _pretraining_builds_a_local_base(self) -> "RunConfig":
        if not self.pretrain.enabled:
            return self
        if not traits(self.engine.name).pretrains:
            raise ConfigProblem("pretrain.enabled", f"engine {self.engine.name} starts from the model it is given "
                                "(engine.verl.model_path: a pretrained model already); pretraining builds a base for "
                                "the local engine's tiny models only")
        return self  # (its text is the arithmetic task's: the one task the local engine trains on)

    @model_validator(mode="after")
    def _datasets_with_sft_need_demonstrations(self) -> "RunConfig":
        if self.task.name == "datasets" and self.sft.enabled:
            bare = [d.name for d in self.task.datasets if not TRAINING_SETS[d.name].demonstrations]
            if bare:
                raise ConfigProblem("sft.enabled", f"training sets {bare} have no demonstrations to fine-tune on; "
                                    "disable SFT or use sets with demonstrations "
                                    f"({', '.join(n for n, t in sorted(TRAINING_SETS.items()) if t.demonstrations)})")
        return self

    @model_validator(mode="after")
    def _evals_read_existing_checkpoints(self) -> "RunConfig":
        every = self.eval.every
        if every is not None and every % self.rl.checkpoint_every:
            raise ConfigProblem("eval.every", f"{every} must be a multiple of rl.checkpoint_every "
                                f"({self.rl.checkpoint_every}): evaluations read the RL checkpoints")
        return self

    def file_problems(self) -> list[str]:
        """`key: reason` for every local dataset file the run names that cannot be read: a sweep finds out when
        it loads, not when a job that reads the file runs. (A file system check, so not a validator: a stage
        job re-validates its config on a node that may see other files.)"""
        where = f" (a relative path is read from the working directory, {Path.cwd()})"
        return [f"{key}: {path!r}: {problem}" + ("" if Path(path).is_absolute() else where)
                for key, path in self.named_files().items() if (problem := record_file_problem(path))]

    def named_files(self) -> dict[str, str]:
        """Key -> path of every local dataset file the run names (eval.paths, task.datasets' paths)."""
        named = {f"eval.paths.{b}": p for b, p in self.eval.paths.items()}
        named.update({f"task.datasets[{i}].path": d.path for i, d in enumerate(self.task.datasets) if d.path})
        return named
