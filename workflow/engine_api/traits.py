"""What the rest of rlsweep asks of an engine by its name, without importing the engine's training code (torch,
verl, vLLM): which runs it can run, which of its settings each stage's id holds, what a run without SFT starts from,
where its checkpoints are evaluated, how many GPUs a job takes, and how `rlsweep smoke` shrinks it. Callers outside
workflow/engines/ ask these, never `engine.name == ...`.

One EngineTraits instance per engine, registered by name in workflow/engine_api/registry.py (ENGINES; a third-party
engine through the entry-point group `rlsweep.engines`). Its `trainer` names the class that trains (the Engine
protocol of protocol.py: sft, rl, integrity_probe), imported only by a stage job. `cfg` below is a validated RunConfig
(workflow/config.py), duck-typed: this floor sits below the config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar



class EngineTraits:
    name: ClassVar[str]
    trainer: ClassVar[str]  # "module:Class" of the engine's Engine (workflow/engine_api/protocol.py)
    settings: ClassVar[str | None] = None  # the engine's own section of the run config (engine.<settings>), if any
    # an RL run can be trained as a chain of segment jobs, each stopping at a step and the next resuming there from
    # its checkpoint (workflow/segments.py); False: one job per run
    trains_in_segments: ClassVar[bool] = False
    # without rl.segment_steps a run splits at its evaluated steps; False: only when rl.segment_steps asks (an engine
    # whose every job start is costly)
    segments_by_default: ClassVar[bool] = True
    # a run may take its first segments from a finished shorter run of the same settings (workflow/extend.py): the
    # engine resumes from the checkpoints extend links, and its chain trains what one job would
    extends_finished_runs: ClassVar[bool] = False
    # it can build a capable base by pretraining its own model on plain text (the pretrain stage, config.pretrain);
    # False: its runs start from a model it is given (verl's model_path)
    pretrains: ClassVar[bool] = False
    lora: ClassVar[bool] = False  # it trains through LoRA adapters when model.lora is set (else its check refuses it)
    # its Engine's integrity_probe gives the integrity preflight's figures (workflow/preflight.py)
    integrity_preflight: ClassVar[bool] = False
    # a job killed mid-run (SLURM preemption, scancel, a crash) resumes from its newest checkpoint when requeued
    resumes_preempted: ClassVar[bool] = False
    multi_node: ClassVar[bool] = False  # one job trains across several nodes of an allocation
    # why it lacks each capability above it lacks (trait name -> one sentence; docs/engines.md prints them, and a
    # structure test requires one for every capability an engine lacks)
    lacks: ClassVar[dict[str, str]] = {}
    # the registered methods (workflow/methods/) it cannot train, each with why; its check() refuses them
    lacks_methods: ClassVar[dict[str, str]] = {}

    def resume_state(self, step: int) -> tuple[str, ...]:
        """What a job of this engine resumes from at `step` beyond the `checkpoints/step_N` every engine exports (the
        optimizer, data position and method state of its own checkpoint format), as paths under the run's RL stage
        directory: extend.py links them from a donor. Empty: the exported checkpoint is all it resumes from."""
        return ()

    def mark_resume(self, run_dir: Path, step: int) -> None:
        """After extend.py linked a donor's state at `step` into `run_dir`: whatever tells this engine's next job
        to resume there (nothing when it finds its newest checkpoint by itself)."""

    def reads_total_steps(self, cfg) -> str | None:
        """Why, in this engine's own settings, the first steps of the run depend on rl.steps (a schedule over the
        run's length): its first steps are then not a shorter run's (extend.py). None: they do not."""
        return None

    def check(self, cfg) -> None:
        """Raise ConfigProblem(key, reason) for a run this engine cannot run (a RunConfig validator: every sweep
        load and every stage job runs it)."""

    def sweep_problems(self, cfg) -> list[str]:
        """Checks too heavy for every validation (they may import the engine's framework), run once per run when a
        sweep loads."""
        return []

    def stage_settings(self, engine: dict[str, Any], stage: str) -> dict[str, Any]:
        """The `engine` section of a stage's config (so of its id) from the dumped engine config: the name, and
        only the settings that decide that stage's result."""
        return {"name": self.name}

    def start_model(self, cfg) -> str | None:
        """The model RL starts from when there is no SFT stage, as the step-0 evaluation names it; None: a random
        initialisation (nothing to evaluate)."""
        return None

    def model_key(self, stage_cfg: dict[str, Any]) -> str | None:
        """What model a stage job runs, from its stage config: jobs with the same key cost the same per step."""
        return stage_cfg.get("model")

    def eval_device(self, engine) -> str:
        """Where an eval job of this engine's checkpoints samples: `cuda` where there is one, or `cpu`."""
        return "cuda"

    def gpus(self, engine) -> int:
        """The GPUs an RL job of this engine trains on."""
        return 0

    def smoke(self, engine: dict[str, Any], ev: dict[str, Any]) -> None:
        """Shrink the raw sweep's `engine` and `eval` sections in place for `rlsweep smoke` (workflow/smoke.py)."""
