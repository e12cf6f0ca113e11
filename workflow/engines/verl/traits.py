"""The verl engine's traits (workflow/engine_api/traits.py): what the rest of rlsweep asks of it without importing verl.
Its settings are the run config's `engine.verl` section (workflow/config.py VerlSettings); how the rest of the run
config maps onto verl's is translate.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workflow.atomic import write_text
from workflow.engine_api.traits import EngineTraits
from workflow.engines.verl.adapters import method_keys
from workflow.models import TINY
from workflow.strict import ConfigProblem

CHECKPOINT_DIR = "verl"  # verl's own checkpoints under an RL stage's directory (trainer.default_local_dir)
TRACKER = "latest_checkpointed_iteration.txt"  # verl's file naming the step it resumes from
OPTIM = "actor_rollout_ref.actor.optim"

# which engine.verl fields decide each stage's result: an SFT job is not redone when only RL's settings change
STAGE_FIELDS = {
    "sft": ("model_path", "device", "n_gpus_per_node", "nnodes", "strategy", "sft_overrides"),
    "rl": ("model_path", "device", "n_gpus_per_node", "nnodes", "strategy", "rollout_tp", "gpu_memory_utilization",
           "max_prompt_length", "overrides"),
    "eval": ("device",),  # the eval stage reads a checkpoint; only where vLLM runs matters
}


class VerlTraits(EngineTraits):
    trainer = "workflow.engines.verl.job.engine:VerlEngine"
    settings = "verl"
    # a segment job resumes from verl's own checkpoint (optimizer, dataloader position, the method's state), as a
    # requeued job does, and every rollout request is seeded from (seed, step, row, session) (rollout/agent_loop.py), so
    # a chain draws one job's rollouts and ends as close to one job as one job to itself (bench/verl_chain.py). Each
    # job starts Ray, vLLM and the model (minutes on a CPU): rl.segment_steps 0 trains a run in one job
    trains_in_segments = True
    # extend links verl's own checkpoint of the donor's step (resume_state) and points verl's tracker file at it
    extends_finished_runs = True
    lora = True  # verl's own LoRA settings (translate.lora_keys)
    integrity_preflight = True  # verl's SFT trainer, or the job's actor worker on a planned step (torchrun/preflight.py)
    resumes_preempted = True  # verl's resume_mode auto, from its newest checkpoint
    multi_node = True  # Ray over the allocation's nodes (slurm/ray_cluster.py), torchrun for SFT
    lacks = {
        "pretrains": "its runs start from a model it is given (engine.verl.model_path): a capable base is a "
                     "pretrained model",
    }

    def resume_state(self, step: int) -> tuple[str, ...]:
        # verl's checkpoint of the step: the actor's FSDP shards and optimizer, the dataloader's position (data.pt),
        # the method's and the gates' state (controller/trainer.py writes them into the same folder)
        return (f"{CHECKPOINT_DIR}/global_step_{step}",)

    def mark_resume(self, run_dir: Path, step: int) -> None:
        # verl resumes (resume_mode auto) from the step its tracker file names; written, never linked: the donor's
        # names the donor's last step, which may lie past the steps taken
        write_text(Path(run_dir) / CHECKPOINT_DIR / TRACKER, str(step))

    def reads_total_steps(self, cfg) -> str | None:
        # verl computes a cosine decay and a warm-up given as a ratio from the optimizer's horizon, which our trainer
        # sets to the run's rl.steps (controller/trainer.py); translate.py asks for neither (constant, warm-up in steps)
        o = cfg.engine.verl.overrides
        schedule = o.get(f"{OPTIM}.lr_scheduler_type", o.get(f"{OPTIM}.warmup_style", "constant"))
        if schedule != "constant":
            return (f"engine.verl.overrides {OPTIM}.lr_scheduler_type {schedule}: its learning rate decays over the "
                    "run's rl.steps")
        warmup = o.get(f"{OPTIM}.lr_warmup_steps", cfg.rl.warmup_steps)
        ratio = o.get(f"{OPTIM}.lr_warmup_steps_ratio", 0.0)
        if (warmup is None or warmup <= 0) and ratio:
            return (f"engine.verl.overrides {OPTIM}.lr_warmup_steps_ratio {ratio}: its warm-up is that share of "
                    "the run's rl.steps (give rl.warmup_steps instead)")
        return None

    def check(self, cfg) -> None:
        v = cfg.engine.verl
        if not v.model_path:
            raise ConfigProblem("engine.verl.model_path", "required with engine verl (a Hugging Face model id or "
                                "directory: the model SFT starts from, or RL when sft.enabled is false)")
        if cfg.model.lora is not None and cfg.model.lora.dropout > 0:
            raise ConfigProblem("model.lora.dropout", "verl's FSDP LoRA has no dropout; set 0 on engine verl")
        if cfg.eval.backend == "local":
            raise ConfigProblem("eval.backend", "local: the local backend samples the local engine's tiny models "
                                "only; a verl run's checkpoints are evaluated with vllm (eval.backend: vllm or auto)")
        _check_driver_side_methods(cfg)

    def sweep_problems(self, cfg) -> list[str]:
        from workflow.engines.verl.job.compose import VerlConfigError, validate  # verl's own checks: imports verl
        try:
            validate(cfg)
        except VerlConfigError as e:
            return [str(e)]
        return []

    def stage_settings(self, engine: dict[str, Any], stage: str) -> dict[str, Any]:
        return {"name": self.name, "verl": {k: engine["verl"][k] for k in STAGE_FIELDS[stage]}}

    def start_model(self, cfg) -> str | None:
        return cfg.engine.verl.model_path

    def model_key(self, stage_cfg: dict[str, Any]) -> str | None:
        return stage_cfg.get("engine", {}).get("verl", {}).get("model_path")

    def eval_device(self, engine) -> str:
        return engine.verl.device

    def gpus(self, engine) -> int:
        v = engine.verl
        return v.n_gpus_per_node * v.nnodes if v.device != "cpu" else 0

    def smoke(self, engine: dict[str, Any], ev: dict[str, Any]) -> None:
        v = engine.setdefault("verl", {})
        for raw_keys in ("overrides", "sft_overrides"):  # GPU-specific; checked against verl's when the sweep loaded
            v.pop(raw_keys, None)
        v.update(model_path=TINY, device="cpu", n_gpus_per_node=1, nnodes=1, rollout_tp=1,
                 max_prompt_length=min(int(v.get("max_prompt_length", 1024)), 512), timeout_min=30)
        ev["backend"] = "vllm"


def _check_driver_side_methods(cfg) -> None:
    """Mixed-policy methods and FAST-GRPO's parts compute on verl's driver, over the step's whole batch."""
    rl, overrides = cfg.rl, cfg.engine.verl.overrides
    if rl.mix == "none" and not rl.fast_grpo_parts:
        return
    # the driver computes the method's token weights once over the step's whole batch: one update of it
    one_update = {"actor_rollout_ref.actor.ppo_mini_batch_size": rl.prompts_per_step,
                  "actor_rollout_ref.actor.ppo_epochs": 1}
    for key, needed in one_update.items():
        if key in overrides and overrides[key] != needed:
            what = f"rl.mix {rl.mix}" if rl.mix != "none" else f"rl.{rl.fast_grpo_parts[0]}"
            raise ConfigProblem(f"engine.verl.overrides.{key}", f"{overrides[key]}: with {what} it must be {needed} "
                                "(the step's token weights are computed once over the whole step batch, which then "
                                "trains in one update)")
    for method, owned in method_keys(rl):  # what a method sets in verl's config (its verl adapter) is not the user's
        for key in owned:
            if key in overrides:
                raise ConfigProblem(f"engine.verl.overrides.{key}", f"rlsweep sets it to {owned[key]!r} for the "
                                    f"method {method} (its verl adapter, workflow/methods/{method}/verl_adapter.py); leave "
                                    "it unset")


VERL = VerlTraits()
