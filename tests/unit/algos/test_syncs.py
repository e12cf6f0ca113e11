"""Host syncs counted in one real training step (issue 83, item 1; workflow/algos/syncs.py, the step in
workflow/engines/step_syncs.py).

The step is the local engine's: the rollout's batch scored and planned, then what runs between the rollout and the
next one: the engine's closure (rl_batch.mixed_closure), the update rule's step, and the step's numbers read into its
row. Each read of a device number there stalls a GPU's launch queue; the goal is one read per step, after the update.

Before the step's numbers stayed on the device (issue 83) a GRPO step made 11 syncs, SFPO's (K = 3) 41 and GXPO's 36:
the loss, clip coefficient and norm read as floats, two reads per micro-batch in the closure, a `bool(any)` in the
mixed loss, transformers' `padding_mask.all()` in every forward, GXPO's compacted quantile sample. Now every rule's
step, and a mixed-policy one, reads once; the probe shows the counter sees a sync planted in each pass, and each kind.
"""

from __future__ import annotations

import pytest
import torch

from workflow.algos.syncs import SyncCounter
from workflow.engines.step_syncs import STEPS, count_step_syncs, step_name

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("rl", STEPS, ids=step_name)
def test_a_training_step_makes_the_host_wait_at_most_once(rl):
    """The step's numbers (the loss, the norms, the closure's clip fraction and KL, GXPO's diagnostics) stay on the
    device through every pass and are read once, after the update (StepStats.read)."""
    step = count_step_syncs(rl)
    assert step.counted.count <= 1, step.counted.report()
    assert all(not isinstance(v, torch.Tensor) for v in step.row.values()), step.row  # every number read
    assert step.trained_on_expert == ("mix" in rl)  # a mixed step's batch holds the expert's tokens


@pytest.mark.parametrize("update", ["grpo", "sfpo", "gxpo"])
def test_a_sync_planted_in_each_pass_is_counted_once_per_pass_and_named(update):
    clean = count_step_syncs({"update": update})
    planted = count_step_syncs({"update": update}, plant=lambda loss: float(loss))
    assert planted.passes == clean.passes > (update != "grpo")
    assert planted.counted.count - clean.counted.count == planted.passes, (clean.counted.report(),
                                                                           planted.counted.report())
    floats = lambda c: sum(n for (what, _), n in c.seen.items() if what == "__float__")  # noqa: E731
    assert floats(planted.counted) - floats(clean.counted) == planted.passes
    assert any(where.startswith("workflow/engines/step_syncs.py") for what, where in planted.counted.seen
               if what == "__float__")  # the report names the line that read


def test_the_counter_sees_each_kind_of_sync_and_says_where():
    x = torch.randn(8)
    with SyncCounter() as syncs:
        y = x * 2  # no sync: work queued on the device
        float(y.sum()), y.sum().item(), y.tolist(), y.cpu(), y.to("cpu"), bool(y.sum() > 0)
        y[y > 0], torch.nonzero(y), y.masked_select(y > 0)
        torch.cuda.synchronize if not torch.cuda.is_available() else torch.cuda.synchronize()
    kinds = {what for what, _ in syncs.seen}
    assert {"__float__", "item", "tolist", "cpu", "__bool__", "__getitem__[bool]", "nonzero",
            "masked_select"} <= kinds, syncs.report()
    assert "to(cpu)" not in kinds  # a CPU tensor's .to("cpu") moves nothing (a device tensor's would count)
    with SyncCounter() as none:
        (x * 2).sum()
    assert none.count == 0


def test_a_plugins_own_step_hands_the_engine_numbers(monkeypatch):
    """A plug-in's rule with a step of its own (tests/support/toy_rule.py: grpo_step twice) returns StepStats whose
    numbers, and the closure's record, are read as it returns them, as the engines' rows and verl's metrics need."""
    import importlib

    import toy_rule
    from workflow.methods import registry
    monkeypatch.setattr(registry.METHODS, "loaded", dict(registry.METHODS.loaded))  # registered for this test only
    importlib.reload(toy_rule)
    step = count_step_syncs({"update": "toy_two_steps"})
    assert step.passes == 2 and step.counted.count <= 1, step.counted.report()
    assert isinstance(step.row["loss"], float) and isinstance(step.row["grad_norm"], float)
    assert isinstance(step.row["clip_frac"], float) and step.row["toy_steps_taken"] == 2
