"""The contract of the verl wing: what its sides share, with no verl import. The sides:

    driver/   the stage job: translates the run config into verl's, starts verl's trainers (torchrun, Ray), plans
              the integrity preflight's probe, reads verl's checkpoints back;
    inside/   what verl runs in its own processes: our worker and trainer, the reward, the mixed-policy driver, the
              preflight's torchrun child (and, beside it, a method's own verl adapter in its folder:
              workflow/methods/prefix_rft/verl.py's agent loop, workflow/methods/slow2fast/verl.py's sampler);
    compat/   the patches verl and vLLM need here (the CPU platform, vLLM's CPU build);
    and the eval backends (workflow/eval/backends.py), which run vLLM.

Each side depends on this module and not on another side (tests/unit/core/test_structure.py checks it), so the shape of what
crosses a process boundary (our section of verl's config, the batch fields of the mixed loss, the preflight's
request, the modules verl loads by name, the environment vLLM's CPU build reads) is written down once, here.
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
    """The stage's TrainLog inside verl's trainer, from what the driver handed it (driver/engine.py log_where: the
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
# the reward function (reward.custom_reward_function), our worker and trainer module (VERL_USE_EXTERNAL_MODULES,
# imported by every Ray process), the SFT trainer torchrun runs, the preflight's child. tests/unit/core/test_structure.py
# imports each.
REWARD_FN = ("pkg://workflow.engines.verl.inside.reward", "compute_score")
WORKER_MODULE = "workflow.engines.verl.inside.worker"
SFT_TRAINER_MODULE = "workflow.engines.verl.inside.sft_trainer"
PPO_MODULE = "workflow.engines.verl.inside.ppo"  # the RL stage's verl process
PREFLIGHT_MODULE = "workflow.engines.verl.inside.preflight"  # the integrity preflight's torchrun child
ROLLOUTS_MODULE = "workflow.engines.verl.inside.rollouts"  # the seeded agent loop, in verl's rollout workers
# (a method's own modules, e.g. Prefix-RFT's agent loop, are on its card: Method.verl_modules)
CPU_MODULE = "workflow.engines.verl.compat.cpu"  # engine.verl.device cpu: verl's CPU platform and the vLLM CPU shims
VLLM_COMPAT_MODULE = "workflow.engines.verl.compat.vllm_compat"  # what verl 0.9.1 expects of vLLM that ours lacks

# what vLLM's CPU build reads when it is imported: the CPU target, and 1 GB of RAM for the KV cache (tiny models)
VLLM_CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}

# ------------------------------------------------------------------ seeded rollouts (inside/rollouts.py)
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


# ------------------------------------------------------------------ the reward's data sources (driver/data.py tags)
DATA_SOURCE = "rlsweep/arithmetic"  # the arithmetic task: its exact-match reward
MATH_SOURCE = "rlsweep/math"  # a datasets task: the eval scorer (math-verify)

# ------------------------------------------------------------------ Slow2Fast's sampler -> the mixed-policy driver
# what the sampler (workflow/methods/slow2fast/verl.py) evicted and refilled in a step, in verl's step metrics
# (summed over its polls by verl), read by the driver (inside/mix_hooks.py, DriverMix.keep_groups)
EVICTED_GROUPS = "rlsweep/slow2fast/evicted_groups"
EVICTED_TOKENS = "rlsweep/slow2fast/evicted_tokens"  # prompt + response tokens generated for the evicted groups


def phase_progress(global_steps: int, total_steps: int) -> float:
    """The share of training done at verl's (1-based) global step: the local engine's step / total at its 0-based
    step, so both engines (and, on verl, the sampler and the driver) switch phase at the same step."""
    return (global_steps - 1) / total_steps


# ------------------------------------------------------------------ a mixed-policy batch (inside/mix_loss.py)
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
