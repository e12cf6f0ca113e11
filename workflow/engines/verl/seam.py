"""The verl seam: every verl symbol rlsweep relies on, as data.

rlsweep's verl engine (workflow/engines/verl/) reaches into verl in five ways, each listed here as a `Use`:

    import    a name we import from verl (`from verl.x import Y`, `import verl.x`, also inside functions)
    subclass  a verl class we derive from (our trainer, workers, replay buffer, agent loop, platform, SFT trainer)
    override  a method (or class attribute) of a verl base class our subclass redefines; some are verl's private
              methods (`_balance_batch`, `_update_actor`, `_save_checkpoint`, ...), which verl may rename or
              re-sign in any release without notice: each carries its `why` (what no public hook of verl 0.9.1
              does for us); where a public hook serves (`on_init_end`) it is used instead
    swap      a method we replace on a verl *instance* at run time (`engine.train_batch = ...`); the target is the
              class that defines it
    patch     a verl module attribute or class attribute we replace at import (cpu.py: verl's process-group set-up,
              the weight receiver's cleanup, FSDP's CPUOffloadPolicy)

Why it is listed: nothing in verl's own release notes tells us which of these a new verl breaks, and most of them
fail only deep inside a Ray job (a private method that is no longer called is not even an error). With the list,
an upgrade fails at once, in tests/verl/test_verl_seam.py, with every symbol that moved: `moved()` resolves each target
in the installed verl and compares its signature with the one recorded from VERL_VERSION. The same test walks
workflow/ and fails when code reaches a verl name that is not listed here.

After a verl upgrade:
1. run `python -m pytest tests/verl/test_verl_seam.py -q`; each line of the failure is one Use that moved;
2. for each, read verl's new code and adapt ours (the `where` field names the module(s) that rely on it); an
   override of a private method whose *signature* is unchanged can still have changed meaning: read its body too;
3. re-record the signatures from the new verl (for each Use, `signature_of(resolve(use.target))`), update SEAM and
   VERL_VERSION, and rerun the test.
A new verl name used in workflow/ needs a Use here (the test says which).

Importing this module does not import verl: `resolve` imports the target's module when asked.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass

VERL_VERSION = "0.9.1"  # the verl the signatures below were recorded from
RAY_TRACE_PARAMETER = "_ray_trace_ctx"  # see signature_of

KINDS = ("import", "subclass", "override", "swap", "patch")


@dataclass(frozen=True)
class Use:
    target: str  # "module" or "module:qualname", e.g. "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._update_actor"
    kind: str  # one of KINDS
    where: str  # our module(s) relying on it, ", "-separated paths from the repository root
    signature: str | None  # str(inspect.signature(...)) as of VERL_VERSION (see signature_of); None: none to check
    # for a private name (an override, swap or patch of verl's `_x`): what it does for us and why no public hook of
    # VERL_VERSION serves (tests/verl/test_verl_seam.py requires it, so a new one is argued for, and an upgrade that adds
    # a public hook shows which to retire)
    why: str = ""

    @property
    def private(self) -> bool:
        name = self.target.replace(":", ".").rsplit(".", 1)[-1]
        return name.startswith("_") and not name.startswith("__")

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(w.strip() for w in self.where.split(","))


def resolve(target: str):
    """The object `target` ("module" or "module:qualname") names in the installed verl; LookupError naming what is
    missing (the module, or the first attribute of the qualname that is not there)."""
    module, _, qualname = target.partition(":")
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise LookupError(f"{target}: module {module} no longer imports ({e})") from None
    walked = module
    for i, part in enumerate(qualname.split(".") if qualname else []):
        if not hasattr(obj, part) and i == 0:  # a submodule not imported yet ("verl.utils:tensordict_utils")
            try:
                importlib.import_module(f"{module}.{part}")
            except ImportError:
                pass
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise LookupError(f"{target}: {walked} has no attribute {part!r}") from None
        walked = f"{walked}{':' if i == 0 else '.'}{part}"
    return obj


def signature_of(obj) -> str | None:
    """What SEAM records for `obj`: the signature of a function or method; of a verl class, the signature of the
    __init__ it gets from verl (None where that __init__ is not verl's: it is another library's to keep); None for
    modules and other values."""
    if inspect.ismodule(obj):
        return None
    if inspect.isclass(obj):
        owner = next((c for c in obj.__mro__ if "__init__" in vars(c)), object)
        if not owner.__module__.startswith("verl"):
            return None
        obj = vars(owner)["__init__"]
    if not callable(obj):
        return None
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    # Ray writes a `_ray_trace_ctx` keyword into the __signature__ of every method of a class it makes an actor in
    # this process (ray.util.tracing's _inject_tracing_into_class, on the unwrapped verl function itself): Ray's
    # mark, not a verl change, and present or not depending on which test ran first in the process.
    return str(sig.replace(parameters=[p for p in sig.parameters.values() if p.name != RAY_TRACE_PARAMETER]))


def _ours(obj) -> bool:
    """A target we replaced in this process ourselves (cpu.py's patches, once installed): not verl's to check."""
    return str(getattr(obj, "__module__", "") or "").startswith("workflow.")


def moved(seam: tuple[Use, ...] | None = None) -> list[str]:
    """Every Use whose target no longer resolves in the installed verl, or whose signature differs from the one
    recorded from VERL_VERSION, in words (empty: the seam holds)."""
    out = []
    for use in SEAM if seam is None else seam:
        try:
            obj = resolve(use.target)
        except LookupError as e:
            out.append(f"{use.kind} {e} [relied on by {use.where}]")
            continue
        if _ours(obj):
            continue
        now = signature_of(obj)
        if now != use.signature:
            out.append(f"{use.kind} {use.target}: signature was {use.signature} in verl {VERL_VERSION}, "
                       f"is now {now} [relied on by {use.where}]")
    return out


_V = "workflow/engines/verl/"
TRAINER, MIX_HOOKS, PPO = _V + "controller/trainer.py", _V + "controller/mix_hooks.py", _V + "controller/ppo.py"
ACTOR, MIX_LOSS = _V + "workers/actor.py", _V + "workers/mix_loss.py"
ROLLOUTS, CPU = _V + "rollout/agent_loop.py", _V + "compat/cpu.py"
PREFLIGHT, SFT = _V + "torchrun/preflight.py", _V + "torchrun/sft_trainer.py"
EXPORT, COMPOSE = _V + "job/export.py", _V + "job/compose.py"
SLOW2FAST, PREFIX = "workflow/methods/slow2fast/verl.py", "workflow/methods/prefix_rft/verl.py"


def _w(*files: str) -> str:
    return ", ".join(files)


# BEGIN SEAM (signatures recorded with inspect from the installed verl, see signature_of)
SEAM: tuple[Use, ...] = (
    # imports
    Use('verl', 'import', COMPOSE, None),
    Use('verl.trainer.ppo.v1:register_trainer', 'import', TRAINER, '(name: str)'),
    Use('verl.trainer.ppo.utils:need_reference_policy', 'import', TRAINER,
        '(config: omegaconf.dictconfig.DictConfig) -> bool'),
    Use('verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync', 'import', TRAINER,
        '(self, config: omegaconf.dictconfig.DictConfig)'),
    Use('verl.utils:tensordict_utils', 'import', _w(ACTOR, MIX_LOSS, MIX_HOOKS, PREFLIGHT, SFT), None),
    Use('verl.utils.metric:reduce_metrics', 'import', TRAINER,
        "(metrics: dict[str, typing.Union[ForwardRef('Metric'), list[typing.Any]]]) -> dict[str, typing.Any]"),
    Use('verl.utils.metric:AggregationType', 'import', MIX_LOSS, None),
    Use('verl.utils.metric:Metric', 'import', MIX_LOSS,
        '(self, aggregation: str | verl.utils.metric.utils.AggregationType, value: Union[int, float, torch.Tensor, '
        'numpy.ndarray, list[int | float | torch.Tensor | numpy.ndarray], NoneType] = None) -> None'),
    Use('verl.utils.metric.utils:AggregationType', 'import', ACTOR, None),
    Use('verl.utils.metric.utils:Metric', 'import', ACTOR,
        '(self, aggregation: str | verl.utils.metric.utils.AggregationType, value: Union[int, float, torch.Tensor, '
        'numpy.ndarray, list[int | float | torch.Tensor | numpy.ndarray], NoneType] = None) -> None'),
    Use('verl.utils.py_functional:rename_dict', 'import', TRAINER, "(data: dict, prefix: str = '') -> dict"),
    Use('verl.workers.engine_workers:ActorRolloutRefWorker', 'import', _w(TRAINER, ACTOR),
        '(self, config: omegaconf.dictconfig.DictConfig, role: str, '
        'distillation_config: Optional[verl.workers.config.distillation.DistillationConfig] = None, **kwargs)'),
    Use('verl.workers.engine_workers:TrainingWorker', 'import', ACTOR,
        '(self, config: verl.workers.config.engine.TrainingWorkerConfig)'),
    Use('verl.workers.engine_workers:TrainingWorkerConfig', 'import', PREFLIGHT,
        "(self, _target_: str = '', model_type: str = None, "
        'model_config: verl.workers.config.model.HFModelConfig = None, '
        'engine_config: verl.workers.config.engine.EngineConfig = None, '
        'optimizer_config: verl.workers.config.optimizer.OptimizerConfig = None, '
        'checkpoint_config: verl.trainer.config.config.CheckpointConfig = None, '
        'profiler_config: verl.utils.profiler.config.ProfilerConfig = None, '
        "auto_select_engine_optim_fn: Callable[[ForwardRef('HFModelConfig'), str], tuple['EngineConfig', "
        "'OptimizerConfig']] = None, extra_context: dict = <factory>) -> None"),
    Use('verl.trainer.ppo.core_algos:kl_penalty', 'import', MIX_LOSS,
        '(logprob: torch.FloatTensor, ref_logprob: torch.FloatTensor, kl_penalty) -> torch.FloatTensor'),
    Use('verl.workers.utils.padding:no_padding_2_padding', 'import', MIX_LOSS,
        '(tensor: torch.Tensor, data: tensordict._td.TensorDict) -> torch.Tensor'),
    Use('verl.workers.utils.losses:ppo_loss', 'import', PREFLIGHT,
        '(config: verl.workers.config.actor.ActorConfig, model_output, data: tensordict._td.TensorDict, '
        'dp_group=None)'),
    Use('verl.plugin.platform.platform_base:PlatformBase', 'import', CPU, None),
    Use('verl.plugin.platform.platform_manager:PlatformRegistry', 'import', CPU, None),
    Use('verl.plugin.platform.platform_manager:set_platform', 'import', CPU,
        '(platform: verl.plugin.platform.platform_base.PlatformBase) -> None'),
    Use('verl.utils.distributed', 'import', CPU, None),
    Use('verl.workers.rollout.vllm_rollout:bucketed_weight_transfer', 'import', CPU, None),
    Use('verl.model_merger.base_model_merger:ModelMergerConfig', 'import', EXPORT,
        "(self, operation: str, backend: str, target_dir: Optional[str] = 'tmp', "
        'hf_upload_path: Optional[str] = None, private: bool = False, test_hf_dir: Optional[str] = None, '
        'tie_word_embedding: bool = False, trust_remote_code: bool = False, is_value_model: bool = False, '
        'local_dir: Optional[str] = None, hf_model_config_path: Optional[str] = None, '
        'use_cpu_initialization: bool = False) -> None'),
    Use('verl.model_merger.fsdp_model_merger:FSDPModelMerger', 'import', EXPORT,
        '(self, config: verl.model_merger.base_model_merger.ModelMergerConfig)'),
    Use('verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync', 'import', SLOW2FAST,
        '(self, trainer_mode: str, trainer_config: omegaconf.dictconfig.DictConfig, '
        'max_off_policy_threshold: int | None, max_off_policy_strategy: str, '
        'sampler_kwargs: omegaconf.dictconfig.DictConfig, poll_interval: float = 2.0, refill_fn=None, '
        'filter_groups_metric: str | None = None, train_batch_size: int | None = None, '
        'gen_batch_size: int | None = None, max_inflight_gen_batches: int = 1, '
        'sync_refill_failed_groups: bool = False)'),
    Use('verl.experimental.agent_loop.agent_loop:register', 'import', _w(PREFIX, ROLLOUTS), '(agent_name: str)'),
    Use('verl.experimental.agent_loop.single_turn_agent_loop:SingleTurnAgentLoop', 'import', _w(PREFIX, ROLLOUTS),
        '(self, *args, **kwargs)'),
    Use('verl.trainer.main_ppo:TaskRunnerV1', 'import', TRAINER, '(*args: Any, **kwargs: Any)'),
    Use('verl.trainer.main_ppo:run_ppo', 'import', PPO, '(config, task_runner_class) -> None'),
    Use('verl.utils.config:omega_conf_to_dataclass', 'import', _w(COMPOSE, PREFLIGHT),
        '(config: omegaconf.dictconfig.DictConfig | dict, dataclass_type: Optional[type[Any]] = None) -> Any'),
    Use('verl.utils.config:validate_config', 'import', COMPOSE,
        '(config: omegaconf.dictconfig.DictConfig, use_reference_policy: bool, use_critic: bool) -> None'),
    Use('verl.trainer.sft_trainer:SFTTrainer', 'import', _w(PREFLIGHT, SFT), '(self, config)'),
    Use('verl.utils.distributed:initialize_global_process_group', 'import', _w(PREFLIGHT, SFT),
        '(timeout_second=36000)'),
    Use('verl.utils.distributed:destroy_global_process_group', 'import', _w(PREFLIGHT, SFT), '()'),
    # subclasses
    Use('verl.workers.engine_workers:TrainingWorker', 'subclass', ACTOR,
        '(self, config: verl.workers.config.engine.TrainingWorkerConfig)'),
    Use('verl.workers.engine_workers:ActorRolloutRefWorker', 'subclass', ACTOR,
        '(self, config: omegaconf.dictconfig.DictConfig, role: str, '
        'distillation_config: Optional[verl.workers.config.distillation.DistillationConfig] = None, **kwargs)'),
    Use('verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync', 'subclass', TRAINER,
        '(self, config: omegaconf.dictconfig.DictConfig)'),
    Use('verl.trainer.sft_trainer:SFTTrainer', 'subclass', SFT, '(self, config)'),
    Use('verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync', 'subclass', SLOW2FAST,
        '(self, trainer_mode: str, trainer_config: omegaconf.dictconfig.DictConfig, '
        'max_off_policy_threshold: int | None, max_off_policy_strategy: str, '
        'sampler_kwargs: omegaconf.dictconfig.DictConfig, poll_interval: float = 2.0, refill_fn=None, '
        'filter_groups_metric: str | None = None, train_batch_size: int | None = None, '
        'gen_batch_size: int | None = None, max_inflight_gen_batches: int = 1, '
        'sync_refill_failed_groups: bool = False)'),
    Use('verl.experimental.agent_loop.single_turn_agent_loop:SingleTurnAgentLoop', 'subclass', _w(PREFIX, ROLLOUTS),
        '(self, *args, **kwargs)'),
    Use('verl.plugin.platform.platform_base:PlatformBase', 'subclass', CPU, None),
    # overrides: methods and class attributes our subclasses redefine (most of the trainer's are verl's private ones)
    Use('verl.workers.engine_workers:TrainingWorker.reset', 'override', ACTOR, '(self)'),
    Use('verl.workers.engine_workers:ActorRolloutRefWorker.actor_worker_cls', 'override', ACTOR,
        '(self, config: verl.workers.config.engine.TrainingWorkerConfig)'),
    # the trainer's public hook after set-up (and resume): the method's saved state, the replay buffer's poll (these
    # were the private _load_checkpoint and _build_replay_buffer)
    Use('verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync.on_init_end', 'override', TRAINER, '(self)'),
    # the trainer's public loop: wrapped so the trackers get their bounded time to send what is queued after its last
    # step (verl returns from fit without a train-end hook the run's log could close in)
    Use('verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync.fit', 'override', TRAINER,
        '(self, agent_loop_manager: verl.experimental.agent_loop.agent_loop.AgentLoopManager)'),
    Use('verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._init_resource_pool_mgr', 'override', TRAINER, '(self)',
        why="puts our RuleActorRolloutRefWorker (the update rules' and mixed losses' steps) in place of verl's actor "
            "worker: verl builds its role -> worker-class map here, from hard-coded classes, with no config key"),
    Use('verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._balance_batch', 'override', TRAINER,
        "(self, batch: transfer_queue.metadata.KVBatchMeta, metrics, logging_prefix='global_seqlen', "
        'keep_minibatch=False)',
        why="the first point of a step that holds the sampled, scored batch: Slow2Fast drops groups, the "
            "method's expert traces replace rollouts and FAST-GRPO shapes scores before old log-probs and "
            "advantages see them; the public on_sample_end gets no batch"),
    Use('verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._compute_advantage', 'override', TRAINER,
        '(self, batch: transfer_queue.metadata.KVBatchMeta, metrics: dict) -> transfer_queue.metadata.KVBatchMeta',
        why="the mixed-policy method's loss plan needs verl's group advantages of the mixed groups (and may "
            "replace them, SRFT); verl's advantage registry (register_adv_est) gets tensors of one batch, not the "
            "driver's method and its state"),
    Use('verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._update_actor', 'override', TRAINER,
        '(self, batch: transfer_queue.metadata.KVBatchMeta, metrics: dict) -> transfer_queue.metadata.KVBatchMeta',
        why="the driver's gate decides once per step whether the rule's extra passes run and hands every rank "
            "that decision with the batch; ReLIFT's SFT update follows the RL one; a step Slow2Fast emptied "
            "takes none. No public hook sits around the actor update"),
    Use('verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._save_checkpoint', 'override', TRAINER, '(self)',
        why="verl saves a step before it computes the step's metrics, and our train_steps rows must be on disk "
            "before the checkpoint (else a resume skips rows never written): the save is deferred to after the "
            "flush. The public CheckpointCallback.on_save runs after the save, too late to reorder it"),
    Use('verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._compute_metrics', 'override', TRAINER,
        '(self, batch: transfer_queue.metadata.KVBatchMeta, metrics, timing_raw, global_steps, epoch)',
        why="the step's train_steps row needs verl's computed metrics (scores, timings, token counts), which "
            "exist only here, after on_step_end; verl's Tracking loggers are a fixed set of backends"),
    Use('verl.trainer.sft_trainer:SFTTrainer.__init__', 'override', SFT, '(self, config)'),
    Use('verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync.__init__', 'override', SLOW2FAST,
        '(self, trainer_mode: str, trainer_config: omegaconf.dictconfig.DictConfig, '
        'max_off_policy_threshold: int | None, max_off_policy_strategy: str, '
        'sampler_kwargs: omegaconf.dictconfig.DictConfig, poll_interval: float = 2.0, refill_fn=None, '
        'filter_groups_metric: str | None = None, train_batch_size: int | None = None, '
        'gen_batch_size: int | None = None, max_inflight_gen_batches: int = 1, '
        'sync_refill_failed_groups: bool = False)'),
    Use('verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync.sample', 'override', SLOW2FAST,
        '(self, global_steps: int, partition_id: str, '
        'batch_size: int) -> tuple[transfer_queue.metadata.KVBatchMeta, dict]'),
    Use('verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync._dapo_filtered_keys', 'override', SLOW2FAST,
        '(self, partition_id: str) -> tuple[set[str], collections.Counter]',
        why="where verl's sampler picks the finished groups to evict and refill with one fresh prompt each; its "
            "public filter (algorithm.filter_groups) keeps groups whose metric varies, not those in an accuracy "
            "band that changes with training progress (Slow2Fast's phases)"),
    Use('verl.experimental.agent_loop.single_turn_agent_loop:SingleTurnAgentLoop.run', 'override', _w(PREFIX, ROLLOUTS),
        '(self, sampling_params: dict[str, typing.Any], priority: int = 0, '
        '**kwargs) -> verl.experimental.agent_loop.agent_loop.AgentLoopOutput'),
    Use('verl.plugin.platform.platform_base:PlatformBase.device_name', 'override', CPU, None),
    Use('verl.plugin.platform.platform_base:PlatformBase.vendor_name', 'override', CPU, None),
    Use('verl.plugin.platform.platform_base:PlatformBase.device_module', 'override', CPU, None),
    Use('verl.plugin.platform.platform_base:PlatformBase.is_available', 'override', CPU, '(self) -> bool'),
    Use('verl.plugin.platform.platform_base:PlatformBase.is_platform_available', 'override', CPU,
        '(self, use_smi_check=False) -> bool'),
    Use('verl.plugin.platform.platform_base:PlatformBase.current_device', 'override', CPU, '(self) -> int'),
    Use('verl.plugin.platform.platform_base:PlatformBase.device_count', 'override', CPU, '(self) -> int'),
    Use('verl.plugin.platform.platform_base:PlatformBase.set_device', 'override', CPU,
        '(self, device_index: int) -> None'),
    Use('verl.plugin.platform.platform_base:PlatformBase.synchronize', 'override', CPU,
        '(self, device_index: Optional[int] = None) -> None'),
    Use('verl.plugin.platform.platform_base:PlatformBase.manual_seed', 'override', CPU, '(self, seed: int) -> None'),
    Use('verl.plugin.platform.platform_base:PlatformBase.manual_seed_all', 'override', CPU,
        '(self, seed: int) -> None'),
    Use('verl.plugin.platform.platform_base:PlatformBase.set_allocator_settings', 'override', CPU,
        '(self, settings: str) -> None'),
    Use('verl.plugin.platform.platform_base:PlatformBase.empty_cache', 'override', CPU, '(self) -> None'),
    Use('verl.plugin.platform.platform_base:PlatformBase.communication_backend_name', 'override', CPU, '(self) -> str'),
    Use('verl.plugin.platform.platform_base:PlatformBase.visible_devices_envvar', 'override', CPU, '(self) -> str'),
    Use('verl.plugin.platform.platform_base:PlatformBase.cudart', 'override', CPU, '(self) -> Any'),
    Use('verl.plugin.platform.platform_base:PlatformBase.get_device_capability', 'override', CPU,
        '(self, device_index: int = 0) -> tuple[typing.Optional[int], typing.Optional[int]]'),
    Use('verl.plugin.platform.platform_base:PlatformBase.is_ipc_supported', 'override', CPU, '(self) -> bool'),
    Use('verl.plugin.platform.platform_base:PlatformBase.nvtx_range', 'override', CPU, '(self, msg: str)'),
    Use('verl.plugin.platform.platform_base:PlatformBase.profiler_start', 'override', CPU, '(self) -> None'),
    Use('verl.plugin.platform.platform_base:PlatformBase.profiler_stop', 'override', CPU, '(self) -> None'),
    Use('verl.plugin.platform.platform_base:PlatformBase.ray_noset_envvars', 'override', CPU, '(self) -> list[str]'),
    Use('verl.plugin.platform.platform_base:PlatformBase.ray_resource_name', 'override', CPU, '(self) -> str'),
    Use('verl.plugin.platform.platform_base:PlatformBase.rollout_env_vars', 'override', CPU,
        '(self) -> dict[str, str]'),
    # swaps: methods replaced on verl instances at run time (the class that defines them)
    Use('verl.workers.engine.base:BaseEngine.train_batch', 'swap', ACTOR,
        '(self, data: tensordict._td.TensorDict, loss_function: Callable) -> Any'),
    Use('verl.workers.engine.base:BaseEngine.lr_scheduler_step', 'swap', ACTOR, '(self)'),
    Use('verl.workers.engine.base:BaseEngine.optimizer_step', 'swap', PREFLIGHT, '(self)'),
    Use('verl.workers.engine_workers:TrainingWorker.train_batch', 'swap', SFT,
        '(self, data: tensordict._td.TensorDict) -> tensordict._td.TensorDict'),
    Use('verl.utils.checkpoint.checkpoint_handler:CheckpointHandler.save_checkpoint', 'swap', SFT, '(self, step)'),
    # patches: verl module and class attributes replaced at import (cpu.py, engine.verl.device cpu)
    Use('verl.utils.distributed:initialize_global_process_group_ray', 'patch', CPU,
        '(timeout_second=None, backend=None)'),
    Use('verl.utils.distributed:initialize_global_process_group', 'patch', CPU, '(timeout_second=36000)'),
    Use('verl.workers.rollout.vllm_rollout.bucketed_weight_transfer:BucketedWeightReceiver._cleanup', 'patch', CPU,
        '(self)',
        why="CPU only: closing the shared-memory weight bucket while a view of it lives raises BufferError and "
            "kills the weight sync; the patch drops our references first and leaves a still-mapped bucket to the "
            "sender. The receiver has no option for it"),
    Use('verl.utils.fsdp_utils:CPUOffloadPolicy', 'patch', CPU, None),
    Use('verl.workers.engine.fsdp.transformer_impl:CPUOffloadPolicy', 'patch', CPU, None),
)
# END SEAM
