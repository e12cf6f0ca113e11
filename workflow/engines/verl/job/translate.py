"""Our run config -> verl 0.9's own configuration, as dotted keys and values (no verl import here: reading and
checking the keys against verl's config is compose.py).

`translate(cfg, ...)` gives Hydra overrides of verl's `ppo_trainer.yaml` for the RL stage, `translate_sft(cfg, ...)`
those of `sft_trainer_engine.yaml` for SFT on verl; the raw keys of `engine.verl.overrides` /
`engine.verl.sft_overrides` come last, so they win. What is only known when the job runs (the SFT checkpoint to
start from, the data files, the output directory) is filled in by the engine; validation uses placeholders, which
verl's checks do not read. `cfg` is a RunConfig or a stage's typed config (workflow/stages.py): only the sections
a translation reads must be there.
"""

from __future__ import annotations

from typing import Any

from workflow.config import RLConfig
from workflow.engines.verl.contract import (CPU_MODULE, REWARD_FN, RL_SECTION, ROLLOUTS_MODULE, SEEDED_AGENT_LOOP,
                                            VLLM_COMPAT_MODULE, VLLM_CPU_ENV)
from workflow.engines.verl.adapters import method_keys as adapter_keys, method_modules
from workflow.methods.registry import get_update_rule

# our aggregation -> (verl loss_agg_mode, needs loss_scale_factor = max response length). Ours: token-sum divides
# by the constant n_seqs * max_len (Dr.GRPO); verl's seq-mean-token-sum-norm = sum / n_seqs / loss_scale_factor.
LOSS_AGG = {"token-mean": ("token-mean", False), "seq-mean-token-mean": ("seq-mean-token-mean", False),
            "token-sum": ("seq-mean-token-sum-norm", True)}

PLACEHOLDER = "<set by the job>"


def external_modules(v, rl=None) -> str:
    """VERL_USE_EXTERNAL_MODULES for a run's verl processes, what every one of them imports: the CPU platform first
    (it must be set up before anything asks verl for a device), the vLLM names verl expects, the seeded agent loop
    (registered by name, which verl's agent-loop workers look up), then the modules of the methods the run selected
    (their verl adapters'). Not our trainer nor our workers: Ray imports each in the process that runs it (the task
    runner controller/ppo.py hands verl, the worker class the trainer puts in its pool), and a module listed here
    costs every verl process its imports and every full garbage collection there its objects."""
    methods = method_modules(rl) if rl is not None else []
    return ",".join(([CPU_MODULE] if v.device == "cpu" else []) + [VLLM_COMPAT_MODULE, ROLLOUTS_MODULE, *methods])


# inherited variables a CPU run's verl processes must not see. MKL_NUM_THREADS: vLLM's CPU worker pins itself to
# its cores and sets OMP_NUM_THREADS to their number (one of two cores: the other is its engine core's), but MKL
# obeys MKL_NUM_THREADS first, which Snakemake sets to the rule's threads: two MKL threads on one pinned core wait
# on each other's time slices in every matmul (SmolLM2 rollouts at ~3 tokens/s instead of ~100). Without it MKL
# follows OMP_NUM_THREADS in every process (the trainer's stays the rule's threads).
CPU_DROPPED_ENV = ("MKL_NUM_THREADS",)


def process_env(v) -> dict[str, str]:
    """The environment a run's verl processes need besides VERL_USE_EXTERNAL_MODULES (Ray's env vars must be
    strings)."""
    return {"TOKENIZERS_PARALLELISM": "false", **(VLLM_CPU_ENV if v.device == "cpu" else {})}


FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}  # FSDP mixed precision, all fp32


def cpu_overrides(cfg) -> dict[str, Any]:
    """verl keys a CPU run needs (engine.verl.device: cpu; raw overrides still win): fp32 throughout, sdpa with
    padded micro-batches (packed sequences need flash attention to stay apart), no torch.compile, vLLM eager in
    fp32 without sleep mode and without chunked prefill, one agent / reward worker and one TransferQueue storage
    unit (memory), the CPU device, and logical GPUs for Ray's placement groups."""
    rl, v = cfg.rl, cfg.engine.verl
    rollout, model_len = "actor_rollout_ref.rollout", v.max_prompt_length + rl.max_new_tokens
    return {
        "actor_rollout_ref.model.use_remove_padding": False,
        "actor_rollout_ref.model.override_config": {"attn_implementation": "sdpa"},
        "actor_rollout_ref.model.enable_gradient_checkpointing": False,
        "actor_rollout_ref.actor.fsdp_config.dtype": "float32",
        # FSDP's compute dtype: without mixed_precision verl autocasts the actor and the reference to bf16
        "actor_rollout_ref.actor.fsdp_config.mixed_precision": FP32,
        "actor_rollout_ref.ref.fsdp_config.mixed_precision": FP32,
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile": False,
        "actor_rollout_ref.actor.use_torch_compile": False,
        f"{rollout}.dtype": "float32",
        f"{rollout}.enforce_eager": True,
        f"{rollout}.enable_sleep_mode": False,
        f"{rollout}.free_cache_engine": False,
        f"{rollout}.agent.num_workers": 1,
        f"{rollout}.checkpoint_engine.update_weights_bucket_megabytes": 64,
        f"{rollout}.max_model_len": model_len,
        f"{rollout}.max_num_batched_tokens": max(512, model_len),
        # a seeded request (rollout/agent_loop.py) must never be prefilled in chunks on a CPU: vLLM discards a chunk's
        # sample and rewinds the request's generator by its offset, which a CPU generator does not have (the engine
        # dies); unchunked, a prompt waits for room in the step's token budget (>= max_model_len) instead
        f"{rollout}.enable_chunked_prefill": False,
        f"{rollout}.max_num_seqs": max(16, rl.prompts_per_step * rl.group_size),
        "reward.num_workers": 1,
        "data.dataloader_num_workers": 0,
        "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
        "trainer.device": "cpu",
    } | ({  # one node: verl's own Ray with logical GPUs; several: the job's Ray cluster declares them per node
        # (VerlEngine._start_ray), and ray.init() refuses num_cpus/num_gpus when it joins a cluster
        "ray_kwargs.ray_init.num_cpus": 16,
        "ray_kwargs.ray_init.num_gpus": v.n_gpus_per_node,
    } if v.nnodes == 1 else {})


def cpu_sft_overrides() -> dict[str, Any]:
    """verl SFT-trainer keys a CPU run needs: as cpu_overrides, plus no data-loader workers."""
    return {"trainer.device": "cpu", "model.use_remove_padding": False,
            "model.override_config": {"attn_implementation": "sdpa"}, "model.enable_gradient_checkpointing": False,
            "engine.use_torch_compile": False, "engine.dtype": "float32",
            "engine.mixed_precision": FP32,
            "data.num_workers": 0}


def lora_keys(prefix: str, lora, rollout: bool = False) -> dict[str, Any]:
    """model.lora as verl's FSDP LoRA keys (`actor_rollout_ref.model` for RL, `model` for SFT): peft adapters on the
    target modules, only they train; the export folds them into the checkpoint (export.py).

    `rollout`: vLLM gets the policy as merged weights (verl's `lora.merge`: the adapter folded in for the sync, the
    base restored from a backup after it, so the base stays exact), not as a vLLM LoRA adapter (verl's default). The
    adapter sync of a model with tied embeddings (SmolLM2, Qwen2.5 below 7B) failed at its first sync, in vLLM's
    tied-weight check, under the embedding name vLLM's LoRA wrapping gives (`embed_tokens.base_layer`); the merged
    sync is what runs the real model end to end (tests/long/test_real_model.py). Its cost: verl sends the merged weights
    in bf16 (its merged path casts), so rollouts sample from a bf16-rounded policy (the log-probs the loss uses are
    the fp32 actor's)."""
    if lora is None:
        return {}
    alpha = int(lora.alpha) if float(lora.alpha).is_integer() else lora.alpha  # verl declares an int
    out = {f"{prefix}.lora_rank": lora.rank, f"{prefix}.lora_alpha": alpha,
           f"{prefix}.target_modules": list(lora.target_modules)}
    if rollout:
        out[f"{prefix}.lora.merge"] = True
    return out
def translate(cfg, *, model_path: str = PLACEHOLDER, train_files: str = PLACEHOLDER,
              val_files: str = PLACEHOLDER, out_dir: str = PLACEHOLDER) -> dict[str, Any]:
    """Dotted verl keys -> values for one RL run (the raw overrides last, so they win)."""
    rl, v = cfg.rl, cfg.engine.verl
    agg, scaled = LOSS_AGG[rl.loss_agg]
    n_gpus = v.n_gpus_per_node * v.nnodes
    micro = rl.micro_batch_size or max(1, rl.prompts_per_step * rl.group_size // n_gpus)
    actor = "actor_rollout_ref.actor"
    out = {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": rl.std_norm,
        "algorithm.use_kl_in_reward": False,
        "actor_rollout_ref.model.path": model_path,
        "data.train_files": train_files,
        "data.val_files": val_files,
        "data.train_batch_size": rl.prompts_per_step,
        "data.max_prompt_length": v.max_prompt_length,
        "data.max_response_length": rl.max_new_tokens,
        "data.seed": cfg.seed,
        # one optimizer step per rollout batch (on-policy GRPO); our update rule decides how many it really takes
        f"{actor}.ppo_mini_batch_size": rl.prompts_per_step,
        f"{actor}.ppo_micro_batch_size_per_gpu": micro,
        f"{actor}.ppo_epochs": 1,
        f"{actor}.strategy": v.strategy,
        f"{actor}.optim.lr": rl.lr,
        f"{actor}.optim.weight_decay": rl.weight_decay,
        f"{actor}.optim.clip_grad": rl.max_grad_norm if rl.max_grad_norm is not None else 1.0e9,
        f"{actor}.optim.lr_scheduler_type": "constant",
        f"{actor}.optim.lr_warmup_steps": rl.warmup_steps if rl.warmup_steps > 0 else -1,  # -1: verl's ratio, 0.0
        f"{actor}.clip_ratio_low": rl.clip_low,
        f"{actor}.clip_ratio_high": rl.clip_high,
        f"{actor}.loss_agg_mode": agg,
        # the KL penalty (and the reference it needs) also with FAST-GRPO's dynamic_kl, whose per-group coefficients
        # travel with the rows (mix_hooks.DriverMix._kl_coef); kl_loss_coef is verl's own loss's
        f"{actor}.use_kl_loss": rl.uses_reference,
        f"{actor}.kl_loss_coef": rl.kl_coef,
        f"{actor}.kl_loss_type": "low_var_kl",  # the k3 estimator, as the local engine
        f"{actor}.entropy_coeff": 0.0,
        f"{actor}.fsdp_config.seed": cfg.seed,
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.n": rl.group_size,
        "actor_rollout_ref.rollout.temperature": rl.temperature,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": v.rollout_tp,
        "actor_rollout_ref.rollout.gpu_memory_utilization": v.gpu_memory_utilization,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.rollout.seed": cfg.seed,
        "trainer.total_training_steps": rl.steps,
        "trainer.save_freq": rl.checkpoint_every,
        "trainer.test_freq": -1,  # our eval stage evaluates the checkpoints
        "trainer.n_gpus_per_node": v.n_gpus_per_node,
        "trainer.nnodes": v.nnodes,
        "trainer.default_local_dir": out_dir,
        "trainer.logger": ["console"],
        "trainer.val_before_train": False,
    }
    out["reward.custom_reward_function.path"], out["reward.custom_reward_function.name"] = REWARD_FN
    out[f"{actor}.shuffle"] = False  # the data-prep rule wrote each step's problems in order
    out["data.shuffle"] = False
    # every Ray process (on every node) imports our worker and trainer through verl's external-modules hook
    out["ray_kwargs.ray_init.runtime_env.env_vars"] = {"VERL_USE_EXTERNAL_MODULES": external_modules(v, rl),
                                                       **process_env(v)}
    # our update rules inside verl: the registered trainer decides the gates and hands the workers their spec
    out["trainer.v1.trainer_mode"] = "rlsweep"
    # the run's RL config, whole, in one place: every verl process reads it back with run_rl (the driver's gates and
    # mixed-policy method, the agent loop, the sampler); the engine adds "log" (where our tables go) at job time
    out[RL_SECTION] = {"rl": rl.model_dump(mode="json")}
    # every rollout request seeded from (seed, step, row, session): a resumed job draws what one job draws
    out["actor_rollout_ref.rollout.agent.default_agent_loop"] = SEEDED_AGENT_LOOP
    out.update(method_keys(rl))  # e.g. Prefix-RFT's agent loop (seeded the same way), Slow2Fast's sampler
    if "entropy" in get_update_rule(rl.update).rollout_signals:  # e.g. SFPO's trigger: the rollout's entropy
        out[f"{actor}.calculate_entropy"] = True
    if scaled:
        out[f"{actor}.loss_scale_factor"] = rl.max_new_tokens
    if rl.uses_reference:
        out["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"] = micro
    out.update(lora_keys("actor_rollout_ref.model", cfg.model.lora, rollout=True))
    if v.device == "cpu":
        out.update(cpu_overrides(cfg))
    out.update(v.overrides)
    return out
def translate_sft(cfg, *, model_path: str | None = None, train_files: str = PLACEHOLDER,
                  out_dir: str = PLACEHOLDER) -> dict[str, Any]:
    """Dotted keys of verl's `sft_trainer_engine.yaml` for one SFT stage (raw sft_overrides last). The loss is
    verl's sft_loss: the global token mean over every assistant token of the batch, across micro-batches and
    ranks (tested micro-batch invariant in tests/verl/test_verl_engine.py)."""
    sft, v = cfg.sft, cfg.engine.verl
    n_gpus = v.n_gpus_per_node * v.nnodes
    out = {
        "model.path": model_path or v.model_path,
        "data.train_files": train_files,
        "data.val_files": None,  # the eval stage evaluates the checkpoints
        "data.train_batch_size": sft.batch_size,
        "data.micro_batch_size_per_gpu": sft.micro_batch_size or max(1, sft.batch_size // n_gpus),
        "data.use_dynamic_bsz": False,  # fixed micro-batches, as the local engine (the loss is invariant anyway)
        "optim.lr": sft.lr,
        "optim.lr_scheduler_type": sft.schedule,
        "optim.lr_warmup_steps_ratio": sft.warmup_ratio,
        "optim.min_lr_ratio": sft.min_lr_ratio,
        "optim.weight_decay": sft.weight_decay,
        "optim.clip_grad": sft.max_grad_norm if sft.max_grad_norm is not None else 1.0e9,
        "engine.strategy": v.strategy,
        "engine.seed": sft.seed,
        "trainer.total_training_steps": sft.steps,
        "trainer.total_epochs": 1,  # the data holds exactly steps x batch_size examples
        "trainer.save_freq": sft.checkpoint_every,
        "trainer.test_freq": -1,
        "trainer.seed": sft.seed,
        "trainer.n_gpus_per_node": v.n_gpus_per_node,
        "trainer.nnodes": v.nnodes,
        "trainer.default_local_dir": out_dir,
        "trainer.logger": ["console"],
        "trainer.resume_mode": "auto",  # a requeued job resumes from verl's own checkpoints
    }
    out.update(lora_keys("model", cfg.model.lora))
    if v.device == "cpu":
        out.update(cpu_sft_overrides())
    out.update(v.sft_overrides)
    return out
# which of our keys each translated verl key comes from, so that verl's complaints name the key the user wrote
OURS = {
    "actor_rollout_ref.actor.ppo_mini_batch_size": "rl.prompts_per_step",
    "data.train_batch_size": "rl.prompts_per_step",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "rl.micro_batch_size",
    "actor_rollout_ref.rollout.n": "rl.group_size",
    "trainer.n_gpus_per_node": "engine.verl.n_gpus_per_node",
    "trainer.nnodes": "engine.verl.nnodes",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "engine.verl.rollout_tp",
}


def method_keys(rl: RLConfig) -> dict[str, Any]:
    """The keys of verl's config the run's selected methods set (their verl adapters: ../adapters.py)."""
    out: dict[str, Any] = {}
    for _, keys in adapter_keys(rl):
        out.update(keys)
    return out
