"""The sweep file: schema, loading and error reporting.

```yaml
name: demo                       # results/<name>/
base: {sft: {steps: 300}, rl: {lr: 1.0e-4}}   # a RunConfig, only what differs from the defaults
grid:                            # dotted key -> list of values: cartesian product
  rl.clip_high: [0.2, 0.28]
  rl.kl_coef: {values: [0.0, 0.01], when: {rl.loss_agg: token-mean}}   # only varies where it applies
zip:                             # parallel lists, one axis of the product
  rl.lr: [1.0e-4, 5.0e-5]
  rl.steps: [40, 80]
exclude:                         # drop points matching every key of an entry
  - {rl.clip_high: 0.2, rl.lr: 5.0e-5}
seeds: [0, 1]
resources: {rl: {threads: 1}}    # how to run a stage; never part of a run's identity
checks: {max_train_overlap: 0.0} # refuse to train on data that contains evaluated benchmark problems
```
Instead of grid / zip / exclude, an `optuna:` block searches the run config with an Optuna study (see
workflow/sweep/study_spec.py for the block):
```yaml
optuna:
  objective: {sql: "select ..."}
  n_trials: 20
  space:
    rl.lr: {type: float, low: 1.0e-5, high: 1.0e-3, log: true}
    rl.sfpo.K: {type: int, low: 1, high: 5, when: {rl.update: sfpo}}
```
Every problem is reported as `<file>: <key path>: <reason>` before any job starts. What a file may not do (size,
nesting, aliases, repeated keys, .inf / .nan): workflow/sweep/loader.py; how many runs it may make: expand.MAX_RUNS.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Discriminator, Field, Tag, PositiveInt, ValidationError, field_validator, model_validator

from workflow.errors import UserError
from workflow.registry import load_object
from workflow.layout import SWEEP_NAME, SWEEP_NAME_RULE
from workflow.slurm.retry import RETRY_RESOURCE
from workflow.strict import ConfigProblem, Seed, Strict, format_validation_error
from workflow.sweep.design_spec import SeedDesign
from workflow.sweep.study_spec import OptunaSpec
from workflow.sweep.loader import YAMLRefused, load_yaml
from workflow.tracking.destinations import CREDENTIALS


class SweepError(UserError):
    """A sweep file that cannot be turned into runs. `str()` is the full, user-facing message."""

    def __init__(self, path: str | Path, problems: list[str]):
        self.path = str(path)
        self.problems = problems
        super().__init__("\n".join(f"{self.path}: {p}" for p in problems))


class ConditionalAxis(Strict):
    """A grid axis that only multiplies the points where every `when` key has (one of) the given value(s)."""

    values: list[Any] = Field(description="The axis's values.")
    when: dict[str, Any] = Field(default_factory=dict, description=(
        "Multiply only the grid points where every key listed here has (one of) the given value(s), e.g. {rl.update: "
        "sfpo}."))


# The checks of a block that belong to a floor above this one (what a study can search against the run config, whether
# a references file reads), registered by their owners as "module:function" and loaded only for a sweep that has the
# block: the sweep file's schema imports neither the study nor the report, and reading a sweep without the block
# loads neither. The optuna check returns the block's problems as "optuna.<key>: reason" lines; the references check
# returns why one file cannot be used, or None.
BLOCK_CHECKS = {"optuna": "workflow.study.space:check_space",
                "report.references": "workflow.report.references:problem"}


_TIME = re.compile(r"^(?:(\d+)-)?(\d{1,3}):([0-5]\d):([0-5]\d)$")  # [D-]HH:MM:SS, as sbatch --time takes it
_MEM = re.compile(r"^(\d+)([KMGT]?)$")


class RetrySettings(Strict):
    """How often a stage's SLURM job is resubmitted after each failure reason, and how (workflow/slurm/retry.py)."""

    timeout: int = Field(0, ge=0, le=10, description=(
        "Resubmissions after TIMEOUT, each with the time limit x time_factor, resuming from the last checkpoint."))
    oom: int = Field(0, ge=0, le=10, description=(
        "Resubmissions after OUT_OF_MEMORY, each with the memory x mem_factor (needs `mem`)."))
    node_fail: int = Field(1, ge=0, le=10, description="Resubmissions after NODE_FAIL, the failed node excluded.")
    time_factor: float = Field(1.5, ge=1.0, le=10.0, description=(
        "How much a TIMEOUT resubmission raises the time limit."))
    mem_factor: float = Field(2.0, gt=1.0, le=10.0, description=(
        "How much an OUT_OF_MEMORY resubmission raises the memory."))

    def encode(self) -> str:
        """`timeout=0,oom=2,...`: a Snakemake resource is an int or a string (retry.RetryPolicy.decode reads it)."""
        return ",".join(f"{k}={v}" for k, v in self.model_dump().items())


class StageResources(Strict):
    """How one stage's jobs run. Locally only `threads` matters (torch threads); on SLURM every field becomes a
    job option. Never part of a run's identity."""

    threads: PositiveInt = Field(1, description=(
        "torch threads of the stage's jobs (locally: how many of Snakemake's cores a job takes); also the default CPUs"
        " per task."))
    gpus_per_node: int = Field(0, ge=0, description="GPUs per node (SLURM --gpus-per-node).")
    nodes: PositiveInt = Field(1, description="Nodes per job (SLURM --nodes; a verl job over several nodes).")
    cpus_per_task: PositiveInt | None = Field(None, description="SLURM --cpus-per-task; null: threads.")
    mem: str | None = Field(None, description=(
        "Memory per node, as sbatch writes it (64G, 500M); null: the partition's default."))
    time: str = Field("04:00:00", description="Time limit, [D-]HH:MM:SS (SLURM --time).")
    partition: str | None = Field(None, description="SLURM partition; null: the cluster's default.")
    account: str | None = Field(None, description="SLURM account to charge.")
    qos: str | None = Field(None, description="SLURM quality of service.")
    constraint: str | None = Field(None, description="SLURM node constraint (features), e.g. a100.")
    exclusive: bool = Field(False, description="Whole nodes for the job (SLURM --exclusive).")
    sbatch_extra: list[str] = Field(default_factory=list, description=(
        "Further sbatch options as long flags, e.g. [\"--reservation=abc\"]."))
    retry: RetrySettings = Field(default_factory=RetrySettings, description=(
        "How often a failed job is resubmitted, by its failure reason (SLURM only)."))

    @field_validator("time")
    @classmethod
    def _time(cls, v: str) -> str:
        if not _TIME.match(v):
            raise ValueError(f"{v!r} is not a time limit of the form [D-]HH:MM:SS")
        return v

    @field_validator("mem")
    @classmethod
    def _mem(cls, v: str | None) -> str | None:
        if v is not None and not _MEM.match(v):
            raise ValueError(f"{v!r} is not a memory size like 64G, 500M or 1024 (MB)")
        return v

    @field_validator("sbatch_extra")
    @classmethod
    def _flags(cls, v: list[str]) -> list[str]:
        bad = [f for f in v if not f.startswith("--")]
        if bad:
            raise ValueError(f"{bad}: each extra sbatch option must be a long flag (--name=value)")
        return v

    @model_validator(mode="after")
    def _oom_needs_mem(self):
        if self.retry.oom and self.mem is None:
            raise ValueError("retry.oom needs mem: an out-of-memory retry multiplies the job's memory, and without mem "
                             "the job has the cluster's default")
        return self

    @property
    def time_minutes(self) -> int:
        d, h, m, s = _TIME.match(self.time).groups()
        return int(d or 0) * 1440 + int(h) * 60 + int(m) + (1 if int(s) else 0)

    def snakemake_resources(self) -> dict[str, int | str]:
        """The rule's `resources:` (what the SLURM executor turns into sbatch options, see workflow/slurm/params.py);
        unset options are left out so the cluster's defaults apply, and so are options at their default (one node,
        a CPU per thread, not exclusive): Snakemake evaluates every resource of every job while it plans."""
        res: dict[str, int | str] = {"runtime": self.time_minutes, "gpus_per_node": self.gpus_per_node}
        if self.nodes > 1:
            res["nodes"] = self.nodes
        if self.cpus_per_task:
            res["cpus_per_task"] = self.cpus_per_task
        if self.exclusive:
            res["exclusive"] = 1
        if self.mem is not None:
            res["mem_mb"] = int(self.mem_gb * 1024)
        for key, value in (("slurm_partition", self.partition), ("slurm_account", self.account),
                           ("qos", self.qos), ("constraint", self.constraint)):
            if value:
                res[key] = value
        if self.sbatch_extra:
            res["slurm_extra"] = " ".join(shlex.quote(f) for f in self.sbatch_extra)
        if self.retry != RetrySettings():  # absent: the executor's RetryPolicy defaults, the same as ours
            res[RETRY_RESOURCE] = self.retry.encode()
        return res

    @property
    def mem_gb(self) -> float | None:
        if self.mem is None:
            return None
        n, unit = _MEM.match(self.mem).groups()
        return int(n) * {"K": 2**-20, "": 2**-10, "M": 2**-10, "G": 1, "T": 1024}[unit]


_STAGE_DEFAULTS = {  # a GPU cluster's sane defaults per stage; a local run uses only the threads
    "data": {"threads": 1, "gpus_per_node": 0, "time": "02:00:00"},  # data preparation and overlap checks (CPU)
    "sft": {"threads": 2, "gpus_per_node": 1, "time": "12:00:00"},
    "rl": {"threads": 1, "gpus_per_node": 1, "time": "24:00:00"},
    "eval": {"threads": 1, "gpus_per_node": 1, "time": "04:00:00"},
}


class Resources(Strict):
    """Per-stage job resources. A stage block in the sweep changes only the keys it names: `rl: {time: 02:00:00}`
    keeps the RL stage's default GPU."""

    data: StageResources = Field(StageResources(**_STAGE_DEFAULTS["data"]), description=(
        "The data and overlap-check jobs."))
    sft: StageResources = Field(StageResources(**_STAGE_DEFAULTS["sft"]), description="The SFT jobs.")
    rl: StageResources = Field(StageResources(**_STAGE_DEFAULTS["rl"]), description="The RL jobs.")
    eval: StageResources = Field(StageResources(**_STAGE_DEFAULTS["eval"]), description="The evaluation jobs.")

    @model_validator(mode="before")
    @classmethod
    def _over_stage_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: {**_STAGE_DEFAULTS[k], **v} if k in _STAGE_DEFAULTS and isinstance(v, dict) else v
                    for k, v in data.items()}
        return data


class Checks(Strict):
    """Gates on what runs; like resources, never part of a run's identity."""

    max_train_overlap: float | None = Field(None, ge=0.0, le=1.0, description=(
        "Refuse to train (SFT and RL stages) when more than this fraction of an evaluated benchmark's problems is in "
        "the training data (workflow/data/overlap.py); null: report the overlap only."))


class ReferenceSpec(Strict):
    """Published results the report prints beside the sweep's own rows (workflow/report/references.py)."""

    file: str = Field(description=(
        "A references file, e.g. references/published.yaml (a relative path is read from the directory snakemake runs "
        "in)."))
    papers: list[str] | None = Field(None, description=(
        "Only these papers' rows (the file's `papers:` keys); null: all."))
    models: list[str] | None = Field(None, description="Only rows of these models; null: all.")

    @model_validator(mode="before")
    @classmethod
    def _a_bare_path(cls, data: Any) -> Any:
        return {"file": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _readable(self) -> "ReferenceSpec":
        # checked now: a typo fails the sweep before any job, not its report hours later
        problem = load_object(BLOCK_CHECKS["report.references"])(self.file, self.papers, self.models)
        if problem:
            raise ConfigProblem("file", problem)
        return self


class ReportSpec(Strict):
    """What `rlsweep report` compares against; never part of a run's identity."""

    baseline: str | None = Field(None, description=(
        "The setting the report's efficiency table measures against, as the report names settings (a run's label, e.g."
        " \"rl.update=grpo\"); null: the one plain GRPO setting when there is exactly one."))
    references: list[ReferenceSpec] = Field([], description=(
        "Published results printed beside the sweep's rows, their averages recomputed and checked (a file path, or "
        "{file, papers, models})."))


# what a tracker's URI may not hold (destinations.CREDENTIALS): credentials come from the environment or the tool's
# own login file, so that the project never writes them anywhere


class TensorBoardTracking(Strict):
    """TensorBoard event files, one folder per training run."""

    dir: str | None = Field(None, description=(
        "Where the event files go: one folder per training run, named by its setting and stage id; null: "
        "results/<sweep>/tensorboard/ (`tensorboard --logdir` it)."))


class MLflowTracking(Strict):
    """An MLflow tracking server or database: one MLflow run per training run, in one experiment."""

    uri: str | None = Field(None, description=(
        "The tracking URI (http://host:port, or a database such as sqlite:///path.db); null: MLFLOW_TRACKING_URI, "
        "else a SQLite database results/<sweep>/mlflow.db. Never credentials: MLflow reads MLFLOW_TRACKING_USERNAME / "
        "_PASSWORD / _TOKEN from the environment."))
    experiment: str | None = Field(None, description=(
        "The MLflow experiment; null: MLFLOW_EXPERIMENT_NAME, else the sweep's name."))

    @field_validator("uri")
    @classmethod
    def _no_credentials(cls, uri: str | None) -> str | None:
        if uri is not None and CREDENTIALS.search(uri):
            # (a ConfigProblem: the message never repeats the value, which would print the secret)
            raise ConfigProblem("", "holds credentials; give them in the environment (MLFLOW_TRACKING_USERNAME, "
                                    "MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN), never in the sweep file")
        return uri


class WandbTracking(Strict):
    """Weights & Biases: one W&B run per training run, in one project."""

    project: str | None = Field(None, description="The W&B project; null: WANDB_PROJECT, else the sweep's name.")
    entity: str | None = Field(None, description=(
        "The W&B entity (team or user); null: WANDB_ENTITY, else the login's default."))
    mode: Literal["online", "offline"] | None = Field(None, description=(
        "online: sent as the job trains; offline: written under `dir` for `wandb sync` later (compute nodes without "
        "internet); null: WANDB_MODE, else online. The API key comes from WANDB_API_KEY or `wandb login`, never the "
        "sweep file."))
    dir: str | None = Field(None, description=(
        "Where W&B writes its files (its wandb/ folder); null: WANDB_DIR, else results/<sweep>/."))


class Tracking(Strict):
    """The experiment trackers a sweep's training runs report to, as they train and through `rlsweep track`. Like
    resources, never part of a run's identity."""

    tensorboard: TensorBoardTracking | None = Field(None, description="TensorBoard event files ({} for the defaults).")
    mlflow: MLflowTracking | None = Field(None, description="MLflow ({} for a local SQLite database).")
    wandb: WandbTracking | None = Field(None, description="Weights & Biases ({project: NAME}).")

    @property
    def backends(self) -> list[str]:
        return [name for name in ("tensorboard", "mlflow", "wandb") if getattr(self, name) is not None]


def _seeds_kind(v: Any) -> str | None:
    """A list is fixed seeds, a mapping a design: one member's errors, not one set per member of the union."""
    if isinstance(v, (dict, SeedDesign)):
        return "seed design"
    return "seed list" if isinstance(v, list) else None


SeedsField = Annotated[Annotated[list[Seed], Tag("seed list")] | Annotated[SeedDesign, Tag("seed design")],
                       Discriminator(_seeds_kind, custom_error_type="seeds", custom_error_message=(
                           "must be a list of seeds, e.g. [0, 1], or a design {compare: KEY, per_round: N, rounds: K}"))]


class SweepSpec(Strict):
    name: str = Field(description="The sweep's name: it names results/<name>/ (1-64 letters, digits, '_', '.', '-').")
    description: str = Field("", description="What the sweep is for (shown in its report).")
    base: dict[str, Any] = Field(default_factory=dict, description=(
        "The run config every run starts from (the keys of the run config below); the grid, zip or study changes it "
        "per run."))
    grid: dict[str, list[Any] | ConditionalAxis] = Field(default_factory=dict, description=(
        "Dotted run-config key -> the values to try; the runs are every combination (a ConditionalAxis {values, when} "
        "multiplies only matching points)."))
    zip_: dict[str, list[Any]] | list[dict[str, list[Any]]] = Field(default_factory=dict, alias="zip", description=(
        "Dotted run-config key -> values, varied together (the i-th values of every key form one point); or a list of "
        "such groups, each zipped and the groups crossed with the grid."))
    exclude: list[dict[str, Any]] = Field(default_factory=list, description=(
        "Grid points to drop: each a mapping of dotted keys to values; a point matching every key of one is left out."))
    seeds: SeedsField = Field(default_factory=lambda: [0], description=(
        "RL seeds: a list (every grid point runs once per seed, its run config's `seed`), or seeds on demand: a "
        "design {compare, per_round, rounds, error, ...} that adds rounds of seeds only where a comparison is still "
        "undecided (workflow/sweep/design_spec.py)."))
    resources: Resources = Field(Resources(), description=(
        "Per-stage job resources (threads locally; SLURM options on a cluster). Never part of a run's identity."))
    checks: Checks = Field(Checks(), description="Gates on what runs; never part of a run's identity.")
    tracking: Tracking = Field(Tracking(), description=(
        "Experiment trackers (TensorBoard, MLflow, W&B) the training runs report to; never part of a run's identity."))
    report: ReportSpec = Field(ReportSpec(), description=(
        "What `rlsweep report` compares against; never part of a run's identity."))
    optuna: OptunaSpec | None = Field(None, description=(
        "An Optuna study over the run config instead of grid / zip / exclude (workflow/study/)."))

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if not SWEEP_NAME.fullmatch(v):
            raise ValueError(SWEEP_NAME_RULE)
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int] | SeedDesign) -> list[int] | SeedDesign:
        if isinstance(v, SeedDesign):
            return v
        if not v:
            raise ValueError("empty list: give at least one seed")
        if len(set(v)) != len(v):
            raise ConfigProblem("", f"repeated seed in {v}")
        return v

    @model_validator(mode="after")
    def _design_without_study(self) -> "SweepSpec":
        if self.design is not None and self.optuna is not None:
            raise ConfigProblem("seeds", "a design of seeds on demand compares a grid's settings; an `optuna:` block "
                                         "searches instead of a grid: use one or the other (a study's trials take a "
                                         "list of seeds)")
        return self

    @property
    def design(self) -> SeedDesign | None:
        """Seeds on demand (`seeds:` as a design), or None for a list of seeds."""
        return self.seeds if isinstance(self.seeds, SeedDesign) else None

    @property
    def seed_list(self) -> list[int]:
        """The seeds every grid point runs when the sweep is expanded: the list, or a design's first round (every
        setting trains it; later rounds are added as the design's driver records them)."""
        return self.design.seeds_of_round(1) if self.design is not None else list(self.seeds)

    @property
    def zip_groups(self) -> list[dict[str, list[Any]]]:
        return [self.zip_] if isinstance(self.zip_, dict) else list(self.zip_)


def read_spec(path: str | Path) -> SweepSpec:
    path = Path(path)
    if not path.is_file():
        raise SweepError(path, ["sweep file not found" + ("" if path.suffix in (".yaml", ".yml") else
                                                           " (expected a .yaml file)")])
    try:
        raw = load_yaml(path)
    except YAMLRefused as e:
        raise SweepError(path, [str(e)]) from None
    except yaml.YAMLError as e:
        raise SweepError(path, [f"not valid YAML: {e}"]) from None
    except OSError as e:
        raise SweepError(path, [f"cannot read the file: {e.strerror}"]) from None
    if not isinstance(raw, dict):
        raise SweepError(path, ["<top level>: must be a mapping with at least `name:`"])
    try:
        return SweepSpec.model_validate(raw)
    except ValidationError as e:
        raise SweepError(path, format_validation_error(e)) from None
