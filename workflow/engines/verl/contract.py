"""The contract of the verl wing: what its sides share, with no verl import. The sides, one folder per process kind:

    job/          the stage job (rlsweep's process): translates the run config into verl's, starts verl's trainers
                  (torchrun, Ray) as supervised children, plans the integrity preflight's probe, reads verl's
                  checkpoints back;
    controller/   verl's controller (its single-controller "driver" process, and the Ray task runner where the PPO
                  trainer runs): our trainer, the update-rule gates, the mixed-policy hooks, the train_steps rows;
    workers/      verl's FSDP workers (one Ray actor per rank): our update rules around verl's engine step, the
                  mixed-policy loss;
    rollout/      verl's agent-loop and reward workers: the seeded agent loop, the reward (a method's own verl
                  adapter sits in its folder and is looked up through the method's adapter: workflow/methods/<name>/
                  verl.py, e.g. Prefix-RFT's agent loop, Slow2Fast's sampler);
    torchrun/     under torchrun: verl's SFT trainer with our rows, the integrity preflight's child;
    compat/       the patches verl and vLLM need here, in every process (the CPU platform, vLLM's CPU build);
    and the eval backends (workflow/eval/backends.py), which run vLLM.

Each side depends on this module and not on another side (tests/unit/core/test_structure.py checks it), so the shape of what
crosses a process boundary (our section of verl's config, the batch fields of an update and of the mixed loss, the
preflight's request, the modules and classes verl loads by name, the environment vLLM's CPU build reads) is
written down once, here.
"""

from __future__ import annotations

from typing import Any

# ------------------------------------------------------------------ our section of verl's config, and its reader
RL_SECTION = "trainer.v1.rlsweep"  # our section of verl's config (trainer_mode rlsweep): {"rl": ..., "log": ...}


def run_rl(section: Any):
    """The run's RLConfig from our section of verl's config (`config.trainer.v1.rlsweep`, an OmegaConf node or a
    plain mapping): the one shape, and the one reader, for every verl process."""
    from workflow.config import RLConfig  # (the run config's models: light, no torch)
    rl = section["rl"]
    if hasattr(rl, "_get_node"):  # an OmegaConf node (inside verl): plain data first
        from omegaconf import OmegaConf
        rl = OmegaConf.to_container(rl, resolve=True)
    return RLConfig.model_validate(rl)


# ------------------------------------------------------------------ where a verl trainer writes what it records
TRACKED_RUN = "tracked_run.json"  # in the stage's directory: the job's tracker run (tracking/runs.py TrackedRun)


def train_log(where: Any, stage: str, total: int | None, until: int | None = None):
    """The stage's TrainLog inside verl's trainer, from what the job handed it (job/engine.py log_where: the
    results root, sweep and run id, and the file of the job's tracker run when it has one): the trainer records the
    steps, so it writes the tables, the live file and, live, the sweep's trackers."""
    import json
    from pathlib import Path
    from workflow.results.train_log import TrainLog
    from workflow.tracking.runs import TrackedRun
    tracked = where.get("tracked")
    return TrainLog(where["results_root"], where["sweep"], stage, where["run_id"], total=total, until=until,
                    tracked=TrackedRun.from_dict(json.loads(Path(tracked).read_text())) if tracked else None)


# ------------------------------------------------------------------ what verl loads by name, in its own processes
# the reward function (reward.custom_reward_function), our trainer (imported in the task runner's process, whose
# class it defines: it registers trainer_mode rlsweep), the worker class the trainer puts in its resource pool, the SFT
# trainer torchrun runs, the preflight's child. tests/unit/core/test_structure.py imports each.
REWARD_FN = ("pkg://workflow.engines.verl.rollout.reward", "compute_score")
TRAINER_MODULE = "workflow.engines.verl.controller.trainer"
WORKER_MODULE = "workflow.engines.verl.workers.actor"  # our FSDP worker classes (Ray imports it in each worker)
WORKER_CLASS = f"{WORKER_MODULE}:RuleActorRolloutRefWorker"  # what the trainer puts in place of verl's actor
SFT_TRAINER_MODULE = "workflow.engines.verl.torchrun.sft_trainer"
PPO_MODULE = "workflow.engines.verl.controller.ppo"  # the RL stage's verl process
PREFLIGHT_MODULE = "workflow.engines.verl.torchrun.preflight"  # the integrity preflight's torchrun child
ROLLOUTS_MODULE = "workflow.engines.verl.rollout.agent_loop"  # the seeded agent loop, in verl's rollout workers
# (a method's own modules, e.g. Prefix-RFT's agent loop, come from its verl adapter: workflow/engines/verl/adapters.py)
CPU_MODULE = "workflow.engines.verl.compat.cpu"  # engine.verl.device cpu: verl's CPU platform and the vLLM CPU shims
VLLM_COMPAT_MODULE = "workflow.engines.verl.compat.vllm_compat"  # what verl 0.9.1 expects of vLLM that ours lacks


def reward_fn():
    """The reward verl calls on every response (REWARD_FN), for a process that scores responses verl did not
    generate (the controller's expert traces: controller/mix_hooks.py): the same function, so the same scores."""
    from workflow.registry import load_object
    module, name = REWARD_FN
    return load_object(f"{module.removeprefix('pkg://')}:{name}")


# what vLLM's CPU build reads when it is imported: the CPU target, and 1 GB of RAM for the KV cache (tiny models)
VLLM_CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}

# ------------------------------------------------------------------ seeded rollouts (rollout/agent_loop.py)
SEEDED_AGENT_LOOP = "rlsweep_seeded"  # verl's single-turn agent loop, each request seeded by rollout_seed


def rollout_seed(seed: int, step: int, index: int, session: int) -> int:
    """vLLM's sampling seed for one rollout: session `session` (of rollout.n) of the prompt at row `index` of the
    run's data, at verl's global step `step`. A function of these alone, so a job resumed at a step (a segment, a
    requeue) draws the rollouts the uninterrupted job would have drawn, whichever engine process serves them; every
    session of a group its own stream. (vLLM seeds the run's engine once at start: without this, each job's
    rollouts after its first request differ from one job's.)"""
    import hashlib
    digest = hashlib.blake2b(f"{seed}:{step}:{index}:{session}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (2 ** 31)  # what vLLM's SamplingParams.seed takes


def seeded(sampling_params: dict, trainer_config, kwargs: dict) -> dict:
    """The request's sampling parameters with its rollout_seed (an agent loop's `run` arguments: the run's verl
    config and the loop's keyword arguments, which carry the step, the row and the session)."""
    index = (kwargs.get("extra_info") or {}).get("index", kwargs.get("index"))
    return {**sampling_params, "seed": rollout_seed(int(trainer_config.data.seed), int(kwargs["global_steps"]),
                                                    int(index), int(kwargs["session_id"]))}


# ------------------------------------------------------------------ the reward's data sources (job/data.py tags)
DATA_SOURCE = "rlsweep/arithmetic"  # the arithmetic task: its exact-match reward
MATH_SOURCE = "rlsweep/math"  # a datasets task: the eval scorer (math-verify)

# ------------------------------------------------------------------ Slow2Fast's sampler -> the mixed-policy driver
# what the sampler (workflow/methods/slow2fast/verl.py) evicted and refilled in a step, in verl's step metrics
# (summed over its polls by verl), read by the controller (controller/mix_hooks.py, DriverMix.keep_groups)
EVICTED_GROUPS = "rlsweep/slow2fast/evicted_groups"
EVICTED_TOKENS = "rlsweep/slow2fast/evicted_tokens"  # prompt + response tokens generated for the evicted groups


def phase_progress(global_steps: int, total_steps: int) -> float:
    """The share of training done at verl's (1-based) global step: the local engine's step / total at its 0-based
    step, so both engines (and, on verl, the sampler and the driver) switch phase at the same step."""
    return (global_steps - 1) / total_steps


# ------------------------------------------------------------------ an update's spec (controller -> workers)
# the batch's non-tensor entry with the update the controller decided (controller/gates.py DriverGates: the rule's
# settings and whether its extra passes are on), which the workers follow (workers/actor.py)
UPDATE_KEY = "rlsweep_update"
METRIC_PREFIX = "rlsweep/"  # our StepStats in the workers' metrics (verl prefixes them with "actor/")

# ------------------------------------------------------------------ a mixed-policy batch (workers/mix_loss.py)
MIX_KEY = "rlsweep_mix"  # the batch's non-tensor entry: {"lam": f's constant}; present iff the batch is planned
# in MIX_KEY's entry of an interleaved SFT batch (ReLIFT): its update's lr factor; such a batch leaves verl's lr
# schedule where it is (one schedule step per RL step, as on the local engine)
LR_SCALE = "lr_scale"
W_RL, W_KL, W_SFT, SHAPED = "rlsweep_w_rl", "rlsweep_w_kl", "rlsweep_w_sft", "rlsweep_shaped"
# the KL penalty's coefficient per token: rl.kl_coef, or its group's under FAST-GRPO's dynamic_kl (the driver's; the
# actor's kl_loss_coef is verl's own loss's)
KL_COEF = "rlsweep_kl_coef"
FIELDS = (W_RL, W_KL, W_SFT, SHAPED, KL_COEF)  # the per-token tensors the driver adds to a planned batch

# ------------------------------------------------------------------ the preflight's request and figures
WHOLE = "whole"  # the key of m = None in the request and the figures (JSON has no None keys)


def split_key(m: int | None) -> str:
    """A micro-batch size as the preflight child's request and figures name it."""
    return WHOLE if m is None else str(m)


# ------------------------------------------------------------------ verl's numbers as ours (both trainers' rows)
def scalar(value: Any) -> float | None:
    """A verl metric as one float: a list's mean; None for what is missing, not a number, a bool or NaN."""
    import math
    if isinstance(value, (list, tuple)):
        value = sum(value) / len(value) if value else None
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def param_count(model_path: str) -> int:
    """N of the FLOPs model: the parameters of the Hugging Face model at `model_path` (tied weights once), as the
    local engine counts its model's. Built on the meta device: no weights are read, nothing is allocated."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path))
    return sum(p.numel() for p in model.parameters())
