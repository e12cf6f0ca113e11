"""Which update the verl workers take each step, decided once on the driver.

In verl every data-parallel rank runs the update; the gates (SFPO's entropy trigger, GXPO's corrective-gradient
norm gate) must take one decision for all of them, so the driver keeps the gates (`DriverGates`) and hands each
update a plain spec in the batch's non-tensor data (`UPDATE_KEY`): which rule, K, alpha, and whether it is still
enabled. The workers build their rule with gates that never trip by themselves (`worker_rule`) and follow the spec.
Nothing here imports verl.
"""

from __future__ import annotations

import math
from typing import Any

from workflow.algos.gates import ZGate
from workflow.algos.update_rules import GRPOStep, GXPO, SFPO, UpdateRule

UPDATE_KEY = "rlsweep_update"
METRIC_PREFIX = "rlsweep/"  # our StepStats in the workers' metrics (verl prefixes them with "actor/")


def rule_settings(rl) -> dict[str, Any]:
    """The JSON-able settings of a run's update rule (an RLConfig), as the driver and the workers get them."""
    s: dict[str, Any] = {"update": rl.update, "max_grad_norm": rl.max_grad_norm}
    if rl.update in ("sfpo", "gxpo"):
        s.update(getattr(rl, rl.update).model_dump(mode="json"))
    return s


class DriverGates:
    """The run's gate, fed on the driver: SFPO's with the rollout entropy before an update, GXPO's with the
    corrective-gradient norm the workers report after it. Once tripped, every later update is plain GRPO."""

    def __init__(self, settings: dict[str, Any]):
        self.settings = settings
        self.gate: ZGate | None = None
        if settings["update"] == "sfpo":
            self.gate = ZGate(settings["window"], settings["tau"], warmup=settings["window"], inclusive=True)
        elif settings["update"] == "gxpo":
            self.gate = ZGate(settings["window"], settings["tau"], warmup=settings["warmup"], inclusive=False)
        self.last_z: float | None = None
        self.tripped_now = False

    def before_update(self, entropy: float | None = None) -> dict[str, Any]:
        """The spec of the next update (call once per training step, before it)."""
        self.tripped_now = False
        if self.settings["update"] == "sfpo" and entropy is not None:  # a NaN entropy trips the gate, as it should
            result = self.gate.update(float(entropy))
            self.last_z, self.tripped_now = result.z, result.tripped_now
        enabled = self.settings["update"] != "grpo" and not (self.gate is not None and self.gate.tripped)
        return {**self.settings, "enabled": enabled}

    def after_update(self, metrics: dict[str, Any]) -> None:
        """Feed GXPO's gate the corrective-gradient norm of the update just taken (a zero norm, a batch without
        learning signal, says nothing about stability and is skipped, as in the rule itself)."""
        if self.settings["update"] != "gxpo" or self.gate.tripped:
            return
        norm = metrics.get(f"actor/{METRIC_PREFIX}gxpo_gcorr_norm")
        if norm is not None and float(norm) > 0:
            result = self.gate.update(float(norm))
            self.last_z, self.tripped_now = result.z, result.tripped_now

    def state_dict(self) -> dict:
        return {"gate": self.gate.state_dict() if self.gate is not None else None}

    def load_state_dict(self, state: dict) -> None:
        if self.gate is not None and state.get("gate"):
            self.gate.load_state_dict(state["gate"])


def worker_rule(settings: dict[str, Any]) -> UpdateRule:
    """The rule a worker runs for these settings, its own gate disabled (tau = inf): the driver decides."""
    name, clip = settings["update"], settings.get("max_grad_norm")
    if name == "sfpo":
        return SFPO(settings["K"], settings["alpha"], window=settings["window"], tau=math.inf, max_grad_norm=clip)
    if name == "gxpo":
        return GXPO(settings["K"], settings["alpha"], eps=settings["eps"], window=settings["window"],
                    warmup=settings["warmup"], tau=math.inf, ratio_source=settings["ratio_source"],
                    clamp=settings["clamp"], clamp_min=settings["clamp_min"], clamp_max=settings["clamp_max"],
                    max_grad_norm=clip)
    return GRPOStep(max_grad_norm=clip)
