"""Update rules by name. The model is verl's `@register_policy_loss` / `get_policy_loss_fn`
(verl/trainer/ppo/core_algos.py): a new rule is one class in one module, decorated with
`@register_update_rule("name")`; `get_update_rule(name)` returns it, and an unknown name fails with the list of
known ones. Its settings, if it has any, are the section `rl.<name>` of the run config (a `RuleSettings` model in
workflow/config.py, which the class names as its `Settings`); both engines build rules through this module, the
local engine with the gate in the rule, verl's workers with the gate on the driver (workflow/algos/rule.py).

Reading a sweep (the Snakefile, the CLI) must not import torch, so this module imports none: the built-in rules are
listed by the module that defines them and imported when first asked for; a rule registered anywhere else (a test,
a plugin module) is known once its module has run.
"""

from __future__ import annotations

import importlib
from typing import Any

BUILTIN_RULES = {
    "grpo": "workflow.algos.rules.grpo",
    "sfpo": "workflow.algos.rules.sfpo",
    "gxpo": "workflow.algos.rules.gxpo",
}
_RULES: dict[str, type] = {}


def register_update_rule(name: str):
    """Class decorator: make the UpdateRule subclass available as `rl.update: <name>`."""
    def register(cls: type) -> type:
        known = _RULES.get(name)
        if known is not None and known.__qualname__ != cls.__qualname__:
            raise ValueError(f"update rule {name!r} is already registered by {known.__module__}.{known.__qualname__}")
        cls.name = name
        _RULES[name] = cls
        return cls
    return register


def update_rule_names() -> list[str]:
    return sorted({*BUILTIN_RULES, *_RULES})


def get_update_rule(name: str) -> type:
    if name not in _RULES and name in BUILTIN_RULES:
        importlib.import_module(BUILTIN_RULES[name])
    try:
        return _RULES[name]
    except KeyError:
        raise ValueError(f"unknown update rule {name!r}; known: {', '.join(update_rule_names())}") from None


def rule_settings(rl) -> dict[str, Any]:
    """A run's rule as plain JSON (an RLConfig -> {update, max_grad_norm, <its rl.<name> section>}): what verl's
    driver and workers get through verl's config."""
    section = getattr(rl, rl.update, None)
    return {"update": rl.update, "max_grad_norm": rl.max_grad_norm,
            **(section.model_dump(mode="json") if section is not None else {})}


def build_update_rule(rl, gate_here: bool = True):
    """The rule an RLConfig selects, built from its settings section."""
    return rule_from_settings(rule_settings(rl), gate_here=gate_here)


def rule_from_settings(settings: dict[str, Any], gate_here: bool = True):
    """The rule `rule_settings` describes. gate_here=False: the rule has no gate of its own and follows
    `set_enabled` (verl's workers, where the driver decides once for every rank)."""
    cls = get_update_rule(settings["update"])
    model = cls.Settings
    section = model(**{k: settings[k] for k in model.model_fields if k in settings}) if model is not None else None
    return cls.build(section, max_grad_norm=settings.get("max_grad_norm"), gate_here=gate_here)
