"""What a method is to rlsweep: a `Method` card (its role, its settings model, where its algorithm lives, what it
sets in an engine's config) and the settings base classes. Cards are light (pydantic, no torch): reading a sweep
loads every card, because the run config's `rl.<name>` sections are the cards' settings models.

Roles:
  update  an update rule (`rl.update`): how one step turns the loss on a rollout batch into parameter updates;
          its algorithm is a workflow.algos.rule.UpdateRule subclass.
  mix     a mixed-policy method (`rl.mix`): which sequences of a group are rollouts, expert traces or prefixed
          continuations, and the loss over them; a workflow.algos.mix.MixedPolicy subclass.
  part    a switch on plain on-policy RL (FAST-GRPO's thinking reward, dynamic KL, Slow2Fast): on when its section's
          `enabled` is true, composing with any update rule and not with a mixed-policy method; a
          workflow.algos.part.Part subclass, whose hooks the engines call on a step's groups.

A method's settings are part of a run's identity only while the method is selected (`rl.update` / `rl.mix` names it,
or its `enabled` is true), so adding a method never changes an existing run's id.
"""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from typing import Any, Callable, Literal

from pydantic import Field

from workflow.registry import load_object
from workflow.strict import Strict

Role = Literal["update", "mix", "part"]
NumberType = Literal["float", "int", "bool"]
ALGORITHM_BASE = {"update": "workflow.algos.rule:UpdateRule", "mix": "workflow.algos.mix:MixedPolicy",
                  "part": "workflow.algos.part:Part"}
ROLE_NAMES = {"update": "update rule", "mix": "mixed-policy method", "part": "FAST-GRPO part"}


@dataclass(frozen=True)
class StepNumber:
    """A number a method logs per training step: a column of `train_steps` (null in the rows of runs that do not
    select the method). The table's schema and verl's metric list are built from the cards' numbers, so a method
    adds one without touching results/ or engines/: its algorithm puts it in its StepStats diagnostics (a rule) or
    in its plan's / step_metrics' columns (a mixed-policy method or a part), under this name."""

    name: str  # a lower-case identifier, not one of train_steps' own columns
    type: NumberType
    meaning: str  # one line: what the number says (docs/configuration.md lists it)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.name):
            raise ValueError(f"step number {self.name!r}: a lower-case identifier (letters, digits, _)")
        if self.type not in typing.get_args(NumberType):
            raise ValueError(f"step number {self.name!r}: type {self.type!r}, one of "
                             f"{', '.join(typing.get_args(NumberType))}")


def numbers(*specs: tuple[str, NumberType, str]) -> tuple[StepNumber, ...]:
    """(name, type, meaning), ... -> a card's `numbers`."""
    return tuple(StepNumber(*spec) for spec in specs)


# what the engines log for every mixed-policy method but plain on-policy RL (`none`), from its loss plan
# (workflow/algos/mix.py): a mixed-policy card's numbers are MIX_NUMBERS + its own
MIX_NUMBERS = numbers(
    ("off_policy_frac", "float", "expert tokens / RL tokens of the step"),
    ("sft_frac", "float", "SFT tokens / trained tokens of the step"),
    ("sft_loss", "float", "the SFT term of the step's loss (first pass)"),
    ("sft_loss_share", "float", "|SFT term| / (|RL term| + |SFT term|) of the step's loss"),
    ("sft_weight", "float", "mean SFT weight of the prompts trained with SFT (null: none was)"),
)


class MethodSettings(Strict):
    """A method's section `rl.<name>` of the run config. The algorithm's constructor takes its fields as keyword
    arguments. `check` holds what depends on the rest of the RL config; it runs only while the method is selected."""

    def check(self, rl: Any) -> None:
        """Raise workflow.strict.ConfigProblem (its key relative to the RL config: `luffy.n_off`, `kl_coef`) if this method cannot run with `rl`."""


class PartSettings(MethodSettings):
    """A part's section: switched on by its own `enabled` (each part an ablation of its own)."""

    enabled: bool = Field(False, description=(
        "Switch the part on (each part is an ablation of its own, composing with any update rule)."))


@dataclass(eq=False)
class Method:
    """One method, registered once under its name (workflow/methods/registry.py). Engine-neutral: what an engine
    needs of a method beyond this is that engine's adapter of it, which the engine looks up by the method's name
    (verl: workflow/engines/verl/adapters.py).

    algorithm:  "module:Class" (imported only when a run trains, so the card stays light) or the class itself.
    settings:   the model of its `rl.<name>` section, or None for a method without settings.
    uses_reference: the step needs the reference policy's log-probs while the method is selected (a KL penalty).
    passes:     an update rule's backward passes per step while its extra passes run, from its settings (SFPO: K + 1;
                GXPO: 3); None: one. What a step costs scales with it (`rlsweep plan` estimates a rule's step at
                another K from one measured at a first: workflow/sweep/plan.py).
    numbers:    the per-step numbers it logs (`numbers(...)`; a mixed-policy method's start with MIX_NUMBERS): its
                columns of `train_steps`.
    reads_total_steps: why a step of it depends on rl.steps (it reads the training progress, step / rl.steps), in
                one sentence a user reads ("Slow2Fast's phases depend on rl.steps"); "" when no step does. A run of
                such a method cannot extend a finished shorter run: its steps would differ (workflow/extend.py).
    headline:   the one per-step number that tells how the method is doing, which `rlsweep watch` shows beside
                reward and entropy while a run of it trains: a column of `train_steps` (its own numbers or the
                table's, e.g. SFPO's `alpha`); "" for none.
    """

    role: Role
    algorithm: str | type | None = None
    settings: type[MethodSettings] | None = None
    uses_reference: bool = False
    passes: Callable[[Any], int] | None = None
    numbers: tuple[StepNumber, ...] = ()
    reads_total_steps: str = ""
    headline: str = ""
    name: str = ""  # set by the registry

    def __post_init__(self) -> None:
        if self.role not in ROLE_NAMES:
            raise ValueError(f"Method role {self.role!r}: one of {', '.join(ROLE_NAMES)}")
        if self.role == "part" and not (self.settings and issubclass(self.settings, PartSettings)):
            raise ValueError("a part's settings must be a PartSettings model (it is switched on by `enabled`)")
        self.numbers = tuple(self.numbers)
        if not all(isinstance(n, StepNumber) for n in self.numbers):
            raise ValueError("a card's numbers are StepNumber's (workflow.methods.base.numbers(...))")


    def __eq__(self, other: object) -> bool:
        """The same method: the same role, algorithm and settings by where they are defined (a module reloaded in a
        notebook or test registers the same method again, not a second one)."""
        return isinstance(other, Method) and self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]

    def _key(self) -> tuple:
        def where(x: Any) -> Any:
            return f"{x.__module__}:{x.__qualname__}" if isinstance(x, type) else x
        return (self.role, where(self.algorithm), where(self.settings), self.uses_reference, self.passes is None,
                self.numbers, self.reads_total_steps, self.headline)

    def nominal_passes(self, section: dict | None) -> int:
        """Backward passes per step while the rule's extra passes run, from its settings section as plain JSON."""
        if self.passes is None:
            return 1
        return int(self.passes(self.settings.model_validate(section or {}) if self.settings else None))

    def load(self) -> Any:
        """The algorithm (imported on first call), checked against the role's base class."""
        algo = load_object(self.algorithm) if isinstance(self.algorithm, str) else self.algorithm
        base = load_object(ALGORITHM_BASE[self.role])
        if not (isinstance(algo, type) and issubclass(algo, base)):
            where = f"{getattr(algo, '__module__', '?')}.{getattr(algo, '__qualname__', algo)}"
            raise TypeError(f"{ROLE_NAMES[self.role]} {self.name!r} ({where}) is not a "
                            f"{base.__module__}.{base.__qualname__}")
        algo.name = self.name  # a rule or method knows the name it runs under (its metrics, its messages)
        return algo
