"""Host syncs counted in one real training step (issue 83, item 1; workflow/algos/syncs.py).

The step is the local engine's: the rollout's batch scored and planned (build_step_batch: outside the count, as on
a GPU the rollout's sampling is host work anyway), then what runs between the rollout and the next one: the engine's
closure (rl_batch.mixed_closure), the update rule's step, and the step's numbers read into its row. Each read of a
device number there stalls a GPU's launch queue; the goal is one read per step, after the update.

Where the step stands is a measured figure (issue 83's note: 11 syncs a GRPO step, 41 SFPO, 36 GXPO before any was
removed), not a number this test holds yet: what it holds is that the counter sees a sync planted in every pass, and
each kind of sync. The goal's assertion (<= 1 per step) comes with the change that meets it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workflow.algos.syncs import SyncCounter
from workflow.config import RunConfig
from workflow.engines.rl_batch import build_step_batch, mixed_closure
from workflow.engines.tiny_lm import TOKENIZER, build_model
from workflow.methods.registry import build_mix, build_update_rule

pytestmark = pytest.mark.fast

BASE = {"model": {"n_layers": 1, "hidden": 32, "n_heads": 2},
        "rl": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 8, "micro_batch_size": 4}}


def one_step(rl: dict, plant=None) -> SyncCounter:
    """Count the syncs of one RL step of `rl` (the local engine's closure and rule); `plant(loss)` runs inside
    every pass of the closure (a probe)."""
    cfg = RunConfig.model_validate({**BASE, "rl": {**BASE["rl"], **rl}})
    torch.manual_seed(0)
    model = build_model(cfg.model, TOKENIZER.vocab_size, 0)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    rule, mix = build_update_rule(cfg.rl), build_mix(cfg.rl)
    prompts = [TOKENIZER.encode("Q:1+2=?A:"), TOKENIZER.encode("Q:3+4=?A:")]
    responses = [TOKENIZER.encode(t) for t in ("3", "4", "\\boxed{3}", "2", "7", "\\boxed{7}", "1", "8")]
    rewards = np.array([[0.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]])
    slots = mix.rollout_slots([0, 0], cfg.rl.group_size, np.random.default_rng(0)) if hasattr(
        mix, "rollout_slots") else None
    from workflow.algos.mix import ON_POLICY
    slots = [s for group in slots for s in group] if slots else [ON_POLICY] * len(responses)
    step = build_step_batch(model, None, mix, cfg.rl, prompts, [[], []], slots, responses, [False] * len(responses),
                            rewards)
    rule.on_rollout(step.signals)
    record: dict = {}
    closure = mixed_closure(model, opt, step, cfg.rl, cfg.rl.micro_batch_size, record)
    if plant is not None:
        inner = closure

        def closure():
            loss = inner()
            plant(loss)
            return loss
    with SyncCounter() as syncs:
        stats = rule.step(params, opt, closure)
        row = {**stats.as_row(), **record}
    assert np.isfinite(row["loss"]) and row["backward_passes"] >= 1
    syncs.passes = row["backward_passes"]
    return syncs


@pytest.mark.parametrize("update", ["grpo", "sfpo", "gxpo"])
def test_a_sync_planted_in_each_pass_is_counted_once_per_pass_and_named(update):
    clean = one_step({"update": update})
    planted = one_step({"update": update}, plant=lambda loss: float(loss))
    assert planted.passes == clean.passes > (update != "grpo")
    assert planted.count - clean.count == planted.passes, (clean.report(), planted.report())
    floats = lambda c: sum(n for (what, _), n in c.seen.items() if what == "__float__")  # noqa: E731
    assert floats(planted) - floats(clean) == planted.passes


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
