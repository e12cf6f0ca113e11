"""Methods by name: update rules, mixed-policy methods and FAST-GRPO's parts in one registry of `Method` cards
(workflow/methods/base.py). The model is verl's `@register_policy_loss` / `get_policy_loss_fn`: a method is
registered once, under its name, and an unknown name fails with the list of known ones (of its role).

A built-in method is one folder, workflow/methods/<name>/: `__init__.py` holds its card and settings (light: reading
a sweep imports it, never torch) and `algorithm.py` its algorithm (imported when a run trains). A lab's package
registers its own cards in the entry-point group `rlsweep.methods` (a card in a light module; its algorithm named by
"module:Class"): its `rl.<name>` section is part of the run config from then on. A class registered in-process
(`@register_update_rule`, `@register_mix`: a test, a notebook) gets a card without settings.

Both engines build rules and methods through this module: the local engine with the gate in the rule, verl's
workers with the gate on the driver (workflow/algos/rule.py).
"""

from __future__ import annotations

from typing import Any, Callable

from workflow.methods.base import ROLE_NAMES, Method, Role, StepNumber
from workflow.registry import Registry

METHODS: Registry[Method] = Registry("method", "methods", base="workflow.methods.base:Method", builtins={
    name: f"workflow.methods.{module}:METHOD" for name, module in {
        "grpo": "grpo", "sfpo": "sfpo", "gxpo": "gxpo",                          # update rules
        "none": "on_policy", "luffy": "luffy", "srft": "srft", "hpt": "hpt",   # mixed-policy methods
        "relift": "relift", "prefix_rft": "prefix_rft",
        "thinking_reward": "thinking_reward", "dynamic_kl": "dynamic_kl",      # FAST-GRPO's parts
        "slow2fast": "slow2fast"}.items()})


def in_order() -> list[tuple[str, Method]]:
    """Every card: the built-ins in the order listed above (the order of a run's `method` name, grpo+thinking_reward+
    dynamic_kl, and of the run config's sections), then the others by name."""
    return [(n, METHODS.get(n)) for n in [*METHODS.builtins, *(n for n in METHODS.names() if n not in METHODS.builtins)]]


def step_numbers() -> list[tuple[StepNumber, list[str]]]:
    """Every per-step number the known methods log, once, in card order, with the methods that log it: the
    method columns of `train_steps` (workflow/results/schemas.py) and what verl's metrics are read for. Two cards
    may share a number (MIX_NUMBERS) only with the same type: a clash names both."""
    found: dict[str, tuple[StepNumber, list[str]]] = {}
    for name, method in in_order():
        for number in method.numbers:
            seen = found.setdefault(number.name, (number, []))
            if seen[0].type != number.type:
                raise ValueError(f"method {name!r} logs {number.name!r} as {number.type}, but method(s) "
                                 f"{', '.join(seen[1])} log it as {seen[0].type}")
            seen[1].append(name)
    return list(found.values())


def names(role: Role) -> list[str]:
    """The methods of one role (loads every card: they are light)."""
    return [n for n, card in METHODS.items() if card.role == role]


def card(name: str, role: Role) -> Method:
    """The card of `name`, which must be a method of `role`; else the names of that role are listed."""
    found = METHODS.get(name) if name in METHODS else None
    if found is None or found.role != role:
        raise ValueError(unknown(name, role))
    return found


def unknown(name: str, role: Role) -> str:
    return f"unknown {ROLE_NAMES[role]} {name!r}; known: {', '.join(names(role))}"


def update_rule_names() -> list[str]:
    return names("update")


def mix_names() -> list[str]:
    return names("mix")


def get_update_rule(name: str) -> type:
    """The UpdateRule subclass registered as `name` (imports it)."""
    return card(name, "update").load()


def get_mix(name: str) -> type:
    """The MixedPolicy subclass registered as `name` (imports it)."""
    return card(name, "mix").load()


def _register_class(role: Role) -> Callable[..., Callable[[type], type]]:
    def register(name: str, numbers: tuple[StepNumber, ...] = ()) -> Callable[[type], type]:
        """Decorator: the class becomes the method `name` (a card without settings, logging `numbers`)."""
        def add(cls: type) -> type:
            METHODS.register(name)(Method(role, algorithm=cls, numbers=numbers))
            cls.name = name
            return cls
        return add
    return register


register_update_rule = _register_class("update")
register_mix = _register_class("mix")


def section(rl, name: str) -> dict[str, Any]:
    """The settings section `rl.<name>` as plain JSON ({} when the method has no settings)."""
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
    rule = card(settings["update"], "update")
    model = rule.settings
    section = model(**{k: settings[k] for k in model.model_fields if k in settings}) if model is not None else None
    return rule.load().build(section, max_grad_norm=settings.get("max_grad_norm"), gate_here=gate_here)


def build_parts(rl) -> list:
    """The parts a run switched on (rl.<part>.enabled), built from their sections (workflow/algos/part.py)."""
    return [card(name, "part").load()(getattr(rl, name)) for name in rl.fast_grpo_parts]


def build_mix(rl):
    """The mixed-policy method an RLConfig selects (rl.mix), built from its settings section rl.<mix>."""
    return get_mix(rl.mix)(**section(rl, rl.mix))
