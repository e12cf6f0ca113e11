"""The update-rule interface: how one training step turns a loss on ONE rollout batch into parameter updates.
Written once, run by both engines (the local torch loop and verl's TrainingWorker).

Call order, once per training step:

    rule.on_rollout({"entropy": H, ...})              # the rollout's signals, before the update
    stats = rule.step(params, optimizer, closure)     # -> StepStats, its numbers read (Python floats)

and around the loop: `state_dict()` when checkpointing, `load_state_dict()` when resuming, `release_buffers()`
once the rule has gone single-pass for good. `closure()` zeroes the gradients, runs forward + backward on the
SAME rollout batch and returns the loss; `optimizer.step()` applies one optimizer update. The learning-rate
scheduler is NOT stepped here: the engine steps it once per training step, however many optimizer steps a rule
takes.

Host syncs. On a GPU each read of a device number into Python stalls the launch queue, so a step reads its numbers
once, after the update: a rule's `update` leaves them on the device (the loss, clip_and_step's norm, diagnostics),
and `step` reads them all at once (StepStats.read), with the numbers the closure keeps in `closure.record` (a dict
of device scalars: the local engine's clip fraction, KL and SFT term), before a step-phase gate is fed.
tests/unit/algos/test_syncs.py counts them: at most one per step.

Gates. A rule whose extra passes can be switched off for good (SFPO's entropy trigger, GXPO's corrective-norm
gate) keeps the gate in the rule (`gate_here=True`, the local engine), or leaves it to a driver that decides once
for every data-parallel rank (`gate_here=False`, verl): the driver builds the same rule with its gate, feeds it
through `feed_gate`, and hands each worker's rule the decision with `set_enabled`.

A new rule: subclass UpdateRule (one pass per step) or MultiPassRule (implementing `multi_pass`), its constructor
taking the fields of its settings section as keyword arguments, and register it once as a method (workflow/methods/: a folder with its card
and settings, workflow/methods/sfpo/ for one; or `@register_update_rule("name")` for a rule without settings).
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar, Literal

import torch
from torch import Tensor
from torch.optim import Optimizer

from workflow.algos.gates import GateResult, ZGate
from workflow.algos.sharded import clip_and_step, process_group

NO_GATE = GateResult(None, False)


@dataclass
class StepStats:
    """One step's numbers. During the step (a rule's `update`) a number may be a device scalar; `read()` makes them
    all Python numbers at once, and a StepStats a rule's `step` returns is read."""

    loss: float | Tensor
    grad_norm: float | Tensor | None
    backward_passes: int
    optimizer_steps: int
    alpha: float | Tensor | None = None
    z: float | None = None
    gate_tripped: bool = False  # True on the step at which the gate tripped
    diagnostics: dict[str, float | Tensor] = field(default_factory=dict)  # rule-specific (GXPO ratio quantiles, ...)

    def as_row(self) -> dict:
        row = asdict(self.read())
        row.update(row.pop("diagnostics"))
        return row

    def read(self, extra: dict | None = None) -> "StepStats":
        """Read the step's device numbers into Python, with those of `extra` (a closure's record), in one transfer
        per device (one host sync where they all lie on one GPU), in place; numbers already read stay. bool and
        integer tensors come back as bool and int."""
        slots = [(self.__dict__, k) for k in ("loss", "grad_norm", "alpha", "z")]
        slots += [(self.diagnostics, k) for k in self.diagnostics] + [(extra, k) for k in (extra or {})]
        pending = [(d, k, d[k]) for d, k in slots if isinstance(d[k], Tensor)]
        for device in {t.device for _, _, t in pending}:
            here = [(d, k, t) for d, k, t in pending if t.device == device]
            values = torch.stack([t.detach().reshape(()).to(torch.float64) for _, _, t in here]).tolist()
            for (d, k, t), v in zip(here, values):
                d[k] = bool(v) if t.dtype == torch.bool else int(v) if not t.is_floating_point() else v
        return self


class UpdateRule:
    """One closure, one optimizer step (GRPO's step); the base of every rule. The loss and grad_norm in StepStats
    are those of the first closure, at the rollout policy, for every rule, so they compare across rules."""

    name: ClassVar[str] = ""  # the name it is registered under (workflow/methods/registry.py)
    # which rollout signals on_rollout needs (an engine computes them only when asked: verl's entropy)
    rollout_signals: ClassVar[tuple[str, ...]] = ()
    # the gate, if any: fed before the update with a rollout signal, or after it with one of the step's stats
    gate_phase: ClassVar[Literal["rollout", "step"] | None] = None
    gate_signal: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs):
        """A plug-in's rule with a `step` of its own (calling grpo_step, whose numbers stay on the device) still hands
        the engines numbers: its step's StepStats are read as it returns them, with the closure's record."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("step")
        if own is not None and not getattr(own, "reads", False):
            @functools.wraps(own)
            def step(self, params, optimizer, closure):
                return own(self, params, optimizer, closure).read(getattr(closure, "record", None))
            step.reads = True  # type: ignore[attr-defined]
            cls.step = step  # type: ignore[method-assign]

    def __init__(self, max_grad_norm: float | None = 1.0, gate_here: bool = True):
        self.max_grad_norm = max_grad_norm
        self.gate_here = gate_here
        self.gate: ZGate | None = None  # built by a subclass that has one, when gate_here
        self._enabled = True  # the driver's decision when the gate is not here
        self._pending = NO_GATE  # the rollout-phase gate's result for the coming step
        self._buffers: dict[str, list[Tensor]] = {}
        self._flat: dict[str, Tensor] = {}  # snapshot(flat=True): the contiguous buffer its copies are views of

    @classmethod
    def build(cls, settings: Any, max_grad_norm: float | None, gate_here: bool = True) -> "UpdateRule":
        """The rule for one settings section (its card's settings model, or None for a rule without settings)."""
        kwargs = settings.model_dump() if settings is not None else {}
        return cls(**kwargs, max_grad_norm=max_grad_norm, gate_here=gate_here)

    # ------------------------------------------------------------------------------------------- the interface
    def on_rollout(self, metrics: dict[str, float]) -> None:
        if self.gate_here and self.gate_phase == "rollout":
            self._pending = self.feed_gate(metrics) or NO_GATE

    def step(self, params: list[Tensor], optimizer: Optimizer, closure: Callable[[], Tensor]) -> StepStats:
        """One training step: the update (numbers left on the device), the step's one read, then a step-phase gate
        fed with what it read. A plug-in may override this with a step of its own (calling grpo_step as often as it
        likes); what it returns is read as it returns (__init_subclass__)."""
        gate, self._pending = self._pending, NO_GATE
        extra_passes = not self.single_pass()  # decided before the update, as the update decides
        stats = self.update(params, optimizer, closure).read(getattr(closure, "record", None))
        if extra_passes and self.gate_here and self.gate_phase == "step":
            gate = self.feed_gate(stats.as_row()) or NO_GATE
        stats.z, stats.gate_tripped = gate.z, gate.tripped_now
        return stats

    def update(self, params: list[Tensor], optimizer: Optimizer, closure: Callable[[], Tensor]) -> StepStats:
        """The step's passes and optimizer steps; its StepStats may hold device scalars (step reads them)."""
        return self.grpo_step(params, optimizer, closure)

    def state_dict(self) -> dict:
        """Gate state, so a restarted stage keeps its window and stays tripped."""
        return {"gate": self.gate.state_dict()} if self.gate is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.gate is not None and "gate" in state:
            self.gate.load_state_dict(state["gate"])

    def release_buffers(self) -> None:
        """Free the parameter-sized copies kept from step to step (the rule is single-pass from now on)."""
        self._buffers.clear()
        self._flat.clear()

    def set_enabled(self, enabled: bool) -> None:
        """The driver's gate decision for the coming step (gate_here=False only)."""
        self._enabled = enabled

    def feed_gate(self, values: dict[str, Any]) -> GateResult | None:
        """Give the gate its signal from `values` (rollout metrics or a step's stats row); None when it was not
        fed: no gate, a missing value, or one the rule says carries no information (gate_value -> None)."""
        value = self.gate_value(values) if self.gate is not None else None
        return self.gate.update(value) if value is not None else None

    @classmethod
    def gate_value(cls, values: dict[str, Any]) -> float | None:
        value = values.get(cls.gate_signal) if cls.gate_signal else None
        return None if value is None else float(value)

    # ------------------------------------------------------------------------------------------- for subclasses
    @property
    def enabled(self) -> bool:
        """Whether the rule's extra passes run this step: its own gate has not tripped, or the driver says so."""
        if not self.gate_here:
            return self._enabled
        return self.gate is None or not self.gate.tripped

    def single_pass(self) -> bool:
        """Whether the coming step calls its closure once (plain GRPO): an engine that must hand each pass a fresh
        copy of its batch (verl's annotates it) copies nothing then. A rule with a `step` or `update` of its own is
        taken to call it more than once unless it says otherwise."""
        return type(self).step is UpdateRule.step and type(self).update is UpdateRule.update

    def grpo_step(self, params, optimizer, closure) -> StepStats:
        loss = closure()
        norm, _ = clip_and_step(params, optimizer, self.max_grad_norm, process_group(params))
        return StepStats(loss=loss.detach(), grad_norm=norm, backward_passes=1, optimizer_steps=1)

    def snapshot(self, name: str, tensors: list[Tensor], flat: bool = False) -> list[Tensor]:
        """A copy of `tensors` in buffers kept from step to step: the memory is the same as fresh clones, but
        allocating (and on CPU page-faulting) a parameter-sized copy every step costs more than the copy itself.
        `flat`: the copies are views of one contiguous buffer, in order (`flat_buffer(name)`), when the tensors share
        a dtype and device (else separate, as without it): elementwise work can then run across tensor boundaries."""
        bufs = self._buffers.get(name)
        if bufs is None or [(b.shape, b.dtype, b.device) for b in bufs] != [(t.shape, t.dtype, t.device)
                                                                             for t in tensors]:
            self._flat.pop(name, None)
            if flat and tensors and len({(t.dtype, t.device) for t in tensors}) == 1:
                whole = torch.empty(sum(t.numel() for t in tensors), dtype=tensors[0].dtype, device=tensors[0].device)
                self._flat[name] = whole
                bufs = [v.view(t.shape) for v, t in zip(whole.split([t.numel() for t in tensors]), tensors)]
            else:
                bufs = [torch.empty_like(t) for t in tensors]
            self._buffers[name] = bufs
        torch._foreach_copy_(bufs, tensors)
        return bufs

    def flat_buffer(self, name: str) -> Tensor | None:
        """The one buffer a `snapshot(name, ..., flat=True)` lies in (None: its copies are separate)."""
        return self._flat.get(name)


class MultiPassRule(UpdateRule):
    """A rule that takes several passes on the batch while enabled and is plain single-pass GRPO (alpha reported
    as 0) once its gate has tripped, or while the driver disables it, or when its settings cannot move the weights
    (`moves()` false, e.g. alpha = 0). Subclasses implement `multi_pass` and build `self.gate` when gate_here."""

    def update(self, params, optimizer, closure) -> StepStats:
        if self.single_pass():
            self.release_buffers()
            stats = self.grpo_step(params, optimizer, closure)
            stats.alpha = 0.0
            return stats
        return self.multi_pass(params, optimizer, closure)

    def single_pass(self) -> bool:
        return not (self.enabled and self.moves())

    def moves(self) -> bool:
        return True

    def multi_pass(self, params, optimizer, closure) -> StepStats:
        raise NotImplementedError
