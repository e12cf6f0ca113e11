"""The run configuration: one validated, fully-resolved description of an SFT -> RL -> eval run.

A sweep file's `base` block plus one grid point is validated into a `RunConfig`. Every field has a default so a
sweep only states what it changes; unknown keys are rejected (`extra="forbid"`) so a typo never silently falls
back to a default. Each stage sees only the part of the config that decides its result (workflow/stages.py),
which is what its id is hashed from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, create_model,
                      field_validator, model_validator)

from workflow.benchmarks.catalog import REGISTRY as BENCHMARKS
from workflow.benchmarks.graders import GRADERS
from workflow.data.sources import REGISTRY as TRAINING_SETS
from workflow.engines.registry import ENGINES, traits
from workflow.hub import record_file_problem
from workflow.methods import registry as methods
from workflow.methods.base import Method
from workflow.methods.registry import METHODS
from workflow.models import check_name as check_model_name
from workflow.strict import ConfigProblem, Seed, Strict


class VerlSettings(Strict):
    """How a run uses verl (engine.name = verl); only then part of the run ids. See
    workflow/engines/verl/driver/translate.py for how the rest of the run config maps onto verl's."""

    # the Hugging Face model (id or directory) SFT starts from, or RL when sft is off; or a built-in model
    # (workflow/models.py: rlsweep:tiny, rlsweep:smollm2-135m)
    model_path: str | None = None
    # where verl runs: cuda (GPU nodes) or cpu (verl + vLLM's CPU build on tiny models: the whole chain on a laptop,
    # a login node or CI; workflow/engines/verl/compat/cpu.py)
    device: Literal["cuda", "cpu"] = "cuda"
    n_gpus_per_node: PositiveInt = 1
    nnodes: PositiveInt = 1
    strategy: Literal["fsdp2", "fsdp"] = "fsdp2"
    rollout_tp: PositiveInt = 1  # vLLM tensor-parallel size of the rollout engine
    gpu_memory_utilization: float = Field(0.6, gt=0.0, le=1.0)  # vLLM's share of GPU memory
    max_prompt_length: PositiveInt = 1024
    overrides: dict[str, Any] = {}  # raw verl config keys (dotted, e.g. actor_rollout_ref.actor.ppo_epochs: 2)
    # kill a verl trainer that runs longer than this (a failing vLLM worker can hang instead of failing); None: only
    # the cluster's time limit. Not part of any id.
    timeout_min: PositiveInt | None = None
    sft_overrides: dict[str, Any] = {}  # raw keys of verl's SFT trainer config (sft_trainer_engine.yaml)

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

    name: str = "local"  # an engine of workflow/engines/registry.py (ENGINES)
    verl: VerlSettings = VerlSettings()  # read only when name = verl

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

    rank: PositiveInt = 8
    alpha: PositiveFloat = 16.0
    # module names (the last part of a module's path, as peft matches them): the attention projections, as the
    # GXPO paper's LoRA runs; add gate_proj, up_proj, down_proj for the MLP too
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)

    @field_validator("target_modules")
    @classmethod
    def _some_modules(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v or len(set(v)) != len(v) or not all(v):
            raise ValueError("name at least one module, each once")
        return v


class ModelConfig(Strict):
    """A tiny random-init causal LM built from a transformers config (no weights are downloaded), optionally trained
    through LoRA adapters (`lora`; part of the run ids only when set)."""

    arch: Literal["qwen2"] = "qwen2"
    n_layers: PositiveInt = 2
    hidden: PositiveInt = 64
    n_heads: PositiveInt = 4
    mlp_ratio: PositiveInt = 3
    max_positions: PositiveInt = 128
    lora: LoRAConfig | None = None  # off by default: full fine-tuning

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> "ModelConfig":
        if self.hidden % self.n_heads:
            raise ConfigProblem("hidden", f"{self.hidden} must be divisible by n_heads ({self.n_heads})")
        return self


class DataSource(Strict):
    """One training set of a `datasets` task (workflow/data/sources.py) and how much of it to take."""

    name: str
    # rows taken: round(weight x the set's rows after filtering and de-duplication); < 1 subsamples, > 1 repeats
    weight: PositiveFloat = 1.0
    path: str | None = None  # a local .jsonl/.parquet in the dataset's own fields (else the Hugging Face cache)
    revision: str | None = None  # a pinned dataset revision on the Hub

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

    name: Literal["arithmetic", "datasets"] = "arithmetic"
    # arithmetic
    split_seed: Seed = 1234
    n_heldout: PositiveInt = 256
    two_step_fraction: float = Field(0.5, ge=0.0, le=1.0)
    # datasets
    datasets: tuple[DataSource, ...] = ()
    template: Literal["boxed", "seed003"] = "boxed"  # how a training prompt is put to the model (eval/prompts.py)
    max_prompt_chars: PositiveInt | None = None  # drop problems longer than this (characters of the problem)
    max_solution_chars: PositiveInt | None = None  # drop demonstrations longer than this (SFT data)
    limit: PositiveInt | None = None  # at most this many rows after the mixture (a random subset, by `seed`)
    seed: Seed = 0  # mixture sampling and order

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


class SFTConfig(Strict):
    """Supervised fine-tuning on worked solutions, loss on answer tokens only, global token-mean."""

    enabled: bool = True
    seed: Seed = 0
    steps: PositiveInt = 300
    batch_size: PositiveInt = 128
    micro_batch_size: PositiveInt | None = None  # None = the whole batch in one forward pass
    lr: PositiveFloat = 3e-3
    schedule: Literal["cosine", "constant"] = "cosine"
    warmup_ratio: float = Field(0.1, ge=0.0, lt=1.0)
    min_lr_ratio: float = Field(0.1, ge=0.0, le=1.0)
    weight_decay: NonNegativeFloat = 0.01
    max_grad_norm: PositiveFloat | None = 1.0
    checkpoint_every: PositiveInt = 100


class RLBase(Strict):
    """GRPO and its common variants (DAPO clip-higher, Dr.GRPO no-std / token-sum), on-policy, with the policy
    update done by an update rule (rl.update), optionally a mixed-policy method (rl.mix) and FAST-GRPO's parts. The
    methods' own sections (rl.sfpo, rl.luffy, rl.slow2fast, ...) come from their cards (workflow/methods/): RLConfig
    below is this model plus one section per registered method with settings."""

    update: str = "grpo"  # a registered update rule (workflow/methods/): grpo, sfpo, gxpo, ...
    # a mixed-policy method (workflow/methods/): none (on-policy), luffy, srft, hpt, relift, prefix_rft
    mix: str = "none"
    steps: PositiveInt = 40
    prompts_per_step: PositiveInt = 32
    group_size: int = Field(8, ge=2)
    temperature: PositiveFloat = 1.0
    max_new_tokens: PositiveInt = 24
    micro_batch_size: PositiveInt | None = None  # sequences per forward pass; None = all
    lr: PositiveFloat = 1e-4
    # linear warm-up of lr over the first steps (then constant). Why: AdamW's first steps move every weight by about
    # lr whatever its gradient (no second-moment history yet), so a fresh optimizer at full lr first undoes part of
    # what SFT taught; a few steps of warm-up let it learn each weight's gradient scale first
    warmup_steps: NonNegativeInt = 0
    weight_decay: NonNegativeFloat = 0.0
    max_grad_norm: PositiveFloat | None = 1.0
    clip_low: float = Field(0.2, gt=0.0, lt=1.0)
    clip_high: PositiveFloat = 0.28
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "token-sum"] = "token-mean"
    std_norm: bool = True
    kl_coef: NonNegativeFloat = 0.0
    checkpoint_every: PositiveInt = 10

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
    def _sections(cls, role: str) -> tuple[str, ...]:
        return tuple(name for name in cls.model_fields if name in _SECTIONS and _SECTIONS[name].role == role)


# One section rl.<name> per registered method with settings, its default the settings' defaults. A method's section
# is part of a run's identity only while the method is selected (workflow/stages.py).
_SECTIONS: dict[str, Method] = {name: card for name, card in methods.in_order() if card.settings is not None}
RLConfig = create_model("RLConfig", __base__=RLBase, __module__=__name__, __doc__=RLBase.__doc__,
                        **{name: (card.settings, card.settings()) for name, card in _SECTIONS.items()})


class EvalConfig(Strict):
    """Evaluation: k samples per problem at temperature T (0 = greedy) on each benchmark of the list.

    Benchmarks are names from workflow/benchmarks/catalog.py (math500, aime24, aime25, amc23, amc83, minerva,
    olympiadbench, gsm8k, arc_c, gpqa_diamond, mmlu_pro, and `arithmetic`, the synthetic held-out set)."""

    benchmarks: list[str] = ["arithmetic"]
    paths: dict[str, str] = {}  # benchmark -> local .jsonl/.parquet in the dataset's own schema (else the HF cache)
    revisions: dict[str, str] = {}  # benchmark -> pinned dataset revision on the Hub
    n_problems: PositiveInt | None = None  # None = every problem
    k: PositiveInt = 8
    temperature: NonNegativeFloat = 0.6
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: PositiveInt = 32
    template: Literal["boxed", "seed003"] = "boxed"  # a tokenizer's own chat template wraps it when there is one
    backend: Literal["auto", "vllm", "local"] = "auto"
    tensor_parallel_size: PositiveInt = 1
    verify_timeout_s: PositiveFloat = 10.0  # per math-verify comparison; a timeout scores wrong
    bootstrap: PositiveInt = 1000  # resamples for the 95% intervals
    every: PositiveInt | None = None  # also evaluate every N RL steps (a multiple of rl.checkpoint_every)
    # also evaluate the model RL starts from (step 0: the SFT checkpoint, or verl's model_path without SFT)
    at_start: bool = False
    seed: Seed = 0
    # graders that judge the stored responses again (workflow/benchmarks/graders.py; rule rescore, table eval_grades),
    # beside each benchmark's own; scoring only, so not part of the eval id: adding one generates nothing
    graders: list[str] = []

    @field_validator("graders")
    @classmethod
    def _known_graders(cls, names: list[str]) -> list[str]:
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
    engine: EngineConfig = EngineConfig()
    model: ModelConfig = ModelConfig()
    task: TaskConfig = TaskConfig()
    sft: SFTConfig = SFTConfig()
    rl: RLConfig = RLConfig()
    eval: EvalConfig = EvalConfig()
    seed: Seed = 0  # the RL seed; the SFT seed is sft.seed so RL seeds can share one SFT job

    @model_validator(mode="after")
    def _the_engine_can_run_it(self) -> "RunConfig":
        traits(self.engine.name).check(self)  # each engine's own limits (workflow/engines/traits.py)
        return self

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
        named = {f"eval.paths.{b}": p for b, p in self.eval.paths.items()}
        named.update({f"task.datasets[{i}].path": d.path for i, d in enumerate(self.task.datasets) if d.path})
        where = f" (a relative path is read from the working directory, {Path.cwd()})"
        return [f"{key}: {path!r}: {problem}" + ("" if Path(path).is_absolute() else where)
                for key, path in named.items() if (problem := record_file_problem(path))]
