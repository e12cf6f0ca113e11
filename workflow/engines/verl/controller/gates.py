"""Which update the verl workers take each step, decided once on the driver.

In verl every data-parallel rank runs the update; a rule's gate (SFPO's entropy trigger, GXPO's corrective-gradient
norm gate) must take one decision for all of them, so the driver keeps the gate (`DriverGates`, which builds the
run's rule with its gate, exactly as the local engine does, and only ever feeds it) and hands each update a plain
spec in the batch's non-tensor data (`UPDATE_KEY`): the rule's settings (workflow.methods.registry.rule_settings) and
whether its extra passes are still enabled. The workers build the same rule without a gate and follow the spec.
Nothing here imports verl.
"""

from __future__ import annotations

from typing import Any

from workflow.algos.rule import MultiPassRule
from workflow.engines.verl.contract import METRIC_PREFIX
from workflow.methods.registry import rule_from_settings



class DriverGates:
    """The run's gate, fed on the driver: before an update with the rollout's signals (SFPO: its entropy), after
    it with the step stats the workers report (GXPO: the corrective-gradient norm). Once tripped, every later
    update is plain GRPO."""

    def __init__(self, settings: dict[str, Any]):
        self.settings = settings
        self.rule = rule_from_settings(settings, gate_here=True)  # the gate lives in it; it never steps here
        self.last_z: float | None = None
        self.tripped_now = False

    def before_update(self, entropy: float | None = None) -> dict[str, Any]:
        """The spec of the next update (call once per training step, before it)."""
        self.tripped_now = False
        if self.rule.gate_phase == "rollout":  # a NaN entropy trips the gate, as it should
            self._record(self.rule.feed_gate({"entropy": entropy}))
        enabled = isinstance(self.rule, MultiPassRule) and self.rule.enabled
        return {**self.settings, "enabled": enabled}

    def after_update(self, metrics: dict[str, Any]) -> None:
        """Feed a step-phase gate the stat the workers reported for the update just taken."""
        if self.rule.gate_phase != "step" or not self.rule.enabled:
            return
        prefix = f"actor/{METRIC_PREFIX}"
        self._record(self.rule.feed_gate({k[len(prefix):]: v for k, v in metrics.items() if k.startswith(prefix)}))

    def _record(self, result) -> None:
        if result is not None:  # the gate was fed
            self.last_z, self.tripped_now = result.z, result.tripped_now

    def state_dict(self) -> dict:
        return self.rule.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.rule.load_state_dict(state)
