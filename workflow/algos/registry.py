"""Update rules and mixed-policy methods by name. The model is verl's `@register_policy_loss` /
`get_policy_loss_fn` (verl/trainer/ppo/core_algos.py): a new rule (or method) is one class in one module, decorated
with `@register_update_rule("name")` (`@register_mix("name")`); `get_update_rule(name)` (`get_mix(name)`) returns
it, and an unknown name fails with the list of known ones. Its settings, if it has any, are the section
`rl.<name>` of the run config (a `RuleSettings` / `MixSettings` model in workflow/config.py, which the class names
as its `Settings`). Both engines build rules through this module, the local engine with the gate in the rule,
verl's workers with the gate on the driver (workflow/algos/rule.py).

Reading a sweep (the Snakefile, the CLI) must not import torch, so this module imports none: the built-ins are
listed here as "module:Class" and imported when first asked for (workflow/registry.py); a class registered
anywhere else (a test) is known once its module has run, and a third-party package's through its entry points
(groups `rlsweep.update_rules`, `rlsweep.mixes`).
"""

from __future__ import annotations

from typing import Any

from workflow.registry import Registry

UPDATE_RULES = Registry("update rule", "update_rules", base="workflow.algos.rule:UpdateRule", builtins={
    "grpo": "workflow.algos.rules.grpo:GRPOStep",
    "sfpo": "workflow.algos.rules.sfpo:SFPO",
    "gxpo": "workflow.algos.rules.gxpo:GXPO",
})
MIXES = Registry("mixed-policy method", "mixes", base="workflow.algos.mix:MixedPolicy", builtins={
    "none": "workflow.algos.mixes.on_policy:OnPolicy",
    "luffy": "workflow.algos.mixes.luffy:LUFFY",
    "srft": "workflow.algos.mixes.srft:SRFT",
    "hpt": "workflow.algos.mixes.hpt:HPT",
    "relift": "workflow.algos.mixes.relift:ReLIFT",
    "prefix_rft": "workflow.algos.mixes.prefix_rft:PrefixRFT",
})
BUILTIN_RULES = UPDATE_RULES.builtins

register_update_rule = UPDATE_RULES.register
update_rule_names = UPDATE_RULES.names
get_update_rule = UPDATE_RULES.get
register_mix = MIXES.register
mix_names = MIXES.names
get_mix = MIXES.get


def section(rl, name: str) -> dict[str, Any]:
    """The settings section `rl.<name>` as plain JSON ({} when the class has no settings)."""
    found = getattr(rl, name, None)
    return found.model_dump(mode="json") if found is not None else {}


def rule_settings(rl) -> dict[str, Any]:
    """A run's rule as plain JSON (an RLConfig -> {update, max_grad_norm, <its rl.<name> section>}): what verl's
    driver and workers get through verl's config."""
    return {"update": rl.update, "max_grad_norm": rl.max_grad_norm, **section(rl, rl.update)}


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


def build_mix(rl):
    """The mixed-policy method an RLConfig selects (rl.mix), built from its settings section rl.<mix>."""
    cls = get_mix(rl.mix)
    return cls(**section(rl, rl.mix))
