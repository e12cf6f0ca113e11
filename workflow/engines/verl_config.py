"""Our run config -> verl 0.9's own configuration, checked by verl's own code before any job starts.

`translate(cfg, ...)` gives Hydra overrides of verl's `ppo_trainer.yaml` (dotted key -> value); `compose(...)`
applies them to verl's composed default config in struct mode (a key verl does not have is an error, not a silent
addition) and `validate(...)` runs verl's own checks: `verl.utils.config.validate_config` and the `_target_`
dataclasses (FSDPActorConfig, RolloutConfig, AlgoConfig, optimizer) with their __post_init__ checks. Anything our
schema cannot express goes through `engine.verl.overrides` (raw dotted verl keys) and is checked the same way.
SFT on verl (sft.enabled with engine verl) is `translate_sft` -> verl's `sft_trainer_engine.yaml`, raw keys in
`engine.verl.sft_overrides`, checked by `validate_sft` (its dataclasses) in the same pass.

What is only known when the job runs (the SFT checkpoint to start from, the data files the data-prep rule writes,
the output directory) is filled in by the engine; validation uses placeholders, which verl's checks do not read.
verl is an optional extra (`pip install -e '.[verl]'`); nothing here imports it at module level.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import io
import os
from functools import lru_cache
from typing import Any

from workflow.config import RunConfig
from workflow.engines.verl_data import REWARD_FN
from workflow.engines.verl_update import rule_settings

# our aggregation -> (verl loss_agg_mode, needs loss_scale_factor = max response length). Ours: token-sum divides
# by the constant n_seqs * max_len (Dr.GRPO); verl's seq-mean-token-sum-norm = sum / n_seqs / loss_scale_factor.
LOSS_AGG = {"token-mean": ("token-mean", False), "seq-mean-token-mean": ("seq-mean-token-mean", False),
            "token-sum": ("seq-mean-token-sum-norm", True)}

PLACEHOLDER = "<set by the job>"


class VerlConfigError(ValueError):
    """A run config verl rejects; `key` is the dotted key to blame (ours, or engine.verl.overrides.<verl key>)."""

    def __init__(self, key: str, reason: str):
        self.key, self.reason = key, reason
        super().__init__(f"{key}: {reason}")


def translate(cfg: RunConfig, *, model_path: str = PLACEHOLDER, train_files: str = PLACEHOLDER,
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
        f"{actor}.clip_ratio_low": rl.clip_low,
        f"{actor}.clip_ratio_high": rl.clip_high,
        f"{actor}.loss_agg_mode": agg,
        f"{actor}.use_kl_loss": rl.kl_coef > 0,
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
    out["ray_kwargs.ray_init.runtime_env.env_vars"] = {"VERL_USE_EXTERNAL_MODULES": "workflow.engines.verl_worker",
                                                       "TOKENIZERS_PARALLELISM": "false"}
    # our update rules inside verl: the registered trainer decides the gates and hands the workers their spec
    out["trainer.v1.trainer_mode"] = "rlsweep"
    out["trainer.v1.rlsweep"] = rule_settings(rl)
    if rl.update == "sfpo":  # its trigger watches the rollout policy's entropy
        out[f"{actor}.calculate_entropy"] = True
    if scaled:
        out[f"{actor}.loss_scale_factor"] = rl.max_new_tokens
    if rl.kl_coef > 0:
        out["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"] = micro
    out.update(v.overrides)
    return out


def translate_sft(cfg: RunConfig, *, model_path: str | None = None, train_files: str = PLACEHOLDER,
                  out_dir: str = PLACEHOLDER) -> dict[str, Any]:
    """Dotted keys of verl's `sft_trainer_engine.yaml` for one SFT stage (raw sft_overrides last). The loss is
    verl's sft_loss: the global token mean over every assistant token of the batch, across micro-batches and
    ranks (tested micro-batch invariant in tests/test_verl_engine.py)."""
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
    out.update(v.sft_overrides)
    return out


def validate_sft(cfg: RunConfig) -> None:
    """Compose verl's SFT config for this run and instantiate the dataclasses its SFT trainer builds."""
    from verl.utils.config import omega_conf_to_dataclass
    raw = set(cfg.engine.verl.sft_overrides)
    config = compose(translate_sft(cfg), raw, SFT)
    for section in ("model", "engine", "optim", "checkpoint"):
        try:
            if section == "model":  # HFModelConfig loads the model's config and tokenizer: only its fields here
                _check_fields(config.model)
            else:
                omega_conf_to_dataclass(config[section])
        except Exception as e:  # noqa: BLE001 - verl raises assertion, value and instantiation errors alike
            raise VerlConfigError(_section_blame(section, raw, SFT, fallback=f"{RAW_PREFIX[SFT]}.{section}"),
                                  f"verl rejects it: {_root_cause(e)}") from None
    micro, batch = config.data.micro_batch_size_per_gpu, config.data.train_batch_size
    n_gpus = cfg.engine.verl.n_gpus_per_node * cfg.engine.verl.nnodes
    if batch % n_gpus:
        raise VerlConfigError("sft.batch_size", f"{batch} must split evenly over the run's {n_gpus} GPUs "
                                                "(engine.verl.n_gpus_per_node x nnodes)")
    if (batch // n_gpus) % micro:
        raise VerlConfigError("sft.micro_batch_size", f"{micro} must divide the {batch // n_gpus} examples each "
                                                      "GPU gets per step")


def _check_fields(section) -> None:
    cls = _target_class(section)
    if cls is not None:
        unknown = [k for k in section.keys() if k != "_target_" and k not in _declared_fields(section)]
        if unknown:
            raise ValueError(f"{cls.__name__} has no field(s) {unknown}")


# the two verl configs we compose: PPO (the RL stage) and the engine-based SFT trainer; raw overrides of each
PPO, SFT = "ppo_trainer", "sft_trainer_engine"
RAW_PREFIX = {PPO: "engine.verl.overrides", SFT: "engine.verl.sft_overrides"}


@lru_cache(maxsize=2)
def _default_config(name: str = PPO):
    """verl's composed config `name` (3-4 s: Hydra + verl imports), once per process."""
    try:
        import verl
        from hydra import compose as hydra_compose, initialize_config_dir
    except ImportError:
        raise VerlConfigError("engine.name", "verl is not installed: pip install -e '.[verl]'") from None
    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                               version_base=None):
        return hydra_compose(config_name=name)


def _key(verl_key: str, raw: set[str], name: str = PPO) -> str:
    """The key to name in an error: the user's raw override as they wrote it, else verl's key."""
    return f"{RAW_PREFIX[name]}.{verl_key}" if verl_key in raw else verl_key


def compose(overrides: dict[str, Any], raw: set[str] = frozenset(), name: str = PPO):
    """verl's default config `name` with these overrides; an unknown key names itself (as ours or as a raw
    override). A key verl's dataclass declares but its YAML leaves out (e.g. engine.mixed_precision, which verl's
    own docs set with Hydra's `+`) is added; any other new key is an error."""
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException
    config = copy.deepcopy(_default_config(name))
    OmegaConf.set_struct(config, True)
    if name == PPO:
        with open_dict(config.trainer.v1):  # our trainer's own section (trainer_mode: rlsweep reads it)
            config.trainer.v1.rlsweep = None
        with open_dict(config.ray_kwargs.ray_init.runtime_env):  # merged over verl's own runtime env by run_ppo
            config.ray_kwargs.ray_init.runtime_env.env_vars = None
    for key, value in overrides.items():
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(config, parent, default=None) if parent else config
        declared = _declared_fields(node)
        if hasattr(node, "keys") and leaf not in node.keys() and leaf in declared:
            with open_dict(node):
                node[leaf] = None
        if not hasattr(node, "keys") or leaf not in node.keys():  # keys(): a mandatory ??? value counts too
            hint = ""
            if hasattr(node, "keys"):
                close = difflib.get_close_matches(leaf, [str(k) for k in node.keys()], n=1)
                hint = f"; did you mean '{parent + '.' if parent else ''}{close[0]}'?" if close else ""
            raise VerlConfigError(_key(key, raw, name), f"verl's config has no key '{key}'{hint}")
        expected = _field_type(node, leaf)
        if expected is not None and not _is_kind(value, expected):
            raise VerlConfigError(_key(key, raw, name),
                                  f"verl's {node.get('_target_', 'config').rsplit('.', 1)[-1]}.{leaf} is "
                                  f"{expected.__name__}, got {value!r}")
        try:
            OmegaConf.update(config, key, value, merge=False)
        except OmegaConfBaseException as e:
            raise VerlConfigError(_key(key, raw, name),
                                  f"verl refuses {value!r}: {e}") from None
    return config


def _target_class(node):
    """The dataclass a config section instantiates (its `_target_`), or None."""
    import dataclasses
    import importlib
    target = node.get("_target_") if hasattr(node, "get") else None
    if not isinstance(target, str):
        return None
    module, _, name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except Exception:  # noqa: BLE001 - an optional check; verl's own validation still runs
        return None
    return cls if dataclasses.is_dataclass(cls) else None


def _declared_fields(node) -> set[str]:
    import dataclasses
    cls = _target_class(node)
    return {f.name for f in dataclasses.fields(cls)} if cls is not None else set()


def _field_type(node, leaf: str) -> type | None:
    """The scalar type verl's dataclass declares for `leaf` of this section (its `_target_`), if any. verl's
    YAML is untyped and Hydra does not check field types, so a string where an int belongs would pass unseen."""
    import typing
    cls = _target_class(node)
    try:
        hints = typing.get_type_hints(cls) if cls is not None else {}
    except Exception:  # noqa: BLE001 - an optional check; verl's own validation still runs
        return None
    if leaf not in hints:
        return None
    hint = hints[leaf]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, getattr(__import__("types"), "UnionType", None)) and len(args) == 1:
        hint = args[0]  # Optional[int] -> int
    return hint if hint in (bool, int, float, str) else None


def _is_kind(value: Any, expected: type) -> bool:
    if value is None:
        return True
    if expected is bool:
        return isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, str)


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


def validate(cfg: RunConfig) -> None:
    """Translate and run verl's own checks (the RL config, and the SFT config when SFT is on); raise
    VerlConfigError naming the key to fix."""
    overrides = translate(cfg)
    raw = set(cfg.engine.verl.overrides)
    config = compose(overrides, raw)
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    sections = {"actor_rollout_ref.actor": config.actor_rollout_ref.actor,
                "actor_rollout_ref.rollout": config.actor_rollout_ref.rollout,
                "algorithm": config.algorithm,
                "actor_rollout_ref.actor.optim": config.actor_rollout_ref.actor.optim}
    for name, section in sections.items():
        try:
            omega_conf_to_dataclass(section)
        except Exception as e:  # noqa: BLE001 - verl raises assertion, value and instantiation errors alike
            raise VerlConfigError(_section_blame(name, raw), f"verl rejects it: {_root_cause(e)}") from None
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # verl prints a success line per call
            validate_config(config, use_reference_policy=cfg.rl.kl_coef > 0, use_critic=False)
    except Exception as e:  # noqa: BLE001
        message = _root_cause(e)
        if message.startswith("real_train_batch_size"):
            key, message = "rl.prompts_per_step", ("rl.prompts_per_step x rl.group_size must split evenly over the "
                                                  f"run's GPUs (engine.verl.n_gpus_per_node x nnodes): {message}")
        else:  # a raw override named in the message first, then the key of ours it was translated from
            key = next((f"engine.verl.overrides.{k}" for k in raw if k.rsplit(".", 1)[1] in message),
                       next((ours for verl_key, ours in OURS.items() if verl_key.rsplit(".", 1)[1] in message),
                            "engine.verl"))
        raise VerlConfigError(key, f"verl rejects it: {message}") from None
    n_gpus = cfg.engine.verl.n_gpus_per_node * cfg.engine.verl.nnodes
    if cfg.engine.verl.rollout_tp > n_gpus or n_gpus % cfg.engine.verl.rollout_tp:
        raise VerlConfigError("engine.verl.rollout_tp", f"must divide the {n_gpus} GPUs of the run")
    if cfg.sft.enabled:
        validate_sft(cfg)


def _section_blame(section: str, raw: set[str], name: str = PPO, fallback: str | None = None) -> str:
    """The key to name for a section verl rejects: the one raw override in it, else `fallback` (the section)."""
    mine = [k for k in raw if k.startswith(section + ".")]
    return _key(mine[0], raw, name) if len(mine) == 1 else (fallback or section)


def _root_cause(e: BaseException) -> str:
    while e.__cause__ is not None:
        e = e.__cause__
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
