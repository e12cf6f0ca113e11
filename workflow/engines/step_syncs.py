"""One real RL training step of the local engine, its host syncs counted (workflow/algos/syncs.py): the sync test's
step (tests/unit/algos/test_syncs.py) and the GPU session's (scripts/gpu_session.py), on any device.

The step is what runs between one rollout and the next: the rollout's batch scored and planned (build_step_batch:
outside the count, as the rollout's sampling is host work anyway), then the engine's closure (rl_batch.mixed_closure),
the update rule's step, and the step's numbers read into its row. On a GPU the same step can also run under
`torch.cuda.set_sync_debug_mode("warn")` (`driver=True`): the driver's own count of the calls that synchronize.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from workflow.algos.syncs import SyncCounter, witnessed_syncs
from workflow.config import RunConfig
from workflow.engines.rl_batch import build_step_batch, mixed_closure
from workflow.engines.tiny_lm import TOKENIZER, build_model
from workflow.methods.registry import build_mix, build_update_rule

BASE = {"model": {"n_layers": 1, "hidden": 32, "n_heads": 2},
        "rl": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 8, "micro_batch_size": 4}}
PROMPTS = ("Q:1+2=?A:", "Q:3+4=?A:")
DEMOS = ("\\boxed{3}", "\\boxed{7}")  # the expert's solutions, for a mixed-policy method
OWN = ("3", "4", "\\boxed{3}", "2", "7", "\\boxed{7}", "1", "8")  # the policy's own sampled answers
REWARDS = ((0.0, 0.0, 1.0, 0.0), (0.0, 1.0, 1.0, 0.0))
# the steps a GPU session and the sync test count: every update rule, and two mixed-policy losses
STEPS = ({"update": "grpo"}, {"update": "sfpo"}, {"update": "gxpo"}, {"update": "grpo", "mix": "luffy"},
         {"update": "grpo", "mix": "srft"})


@dataclass
class StepSyncs:
    counted: SyncCounter  # what SyncCounter saw
    passes: int  # the step's backward passes
    row: dict  # the step's numbers, read
    driver: int | None = None  # synchronizing calls the CUDA driver warned of (driver=True on a GPU), else None
    trained_on_expert: bool = False  # the step's batch had off-policy tokens or an SFT term


def step_name(rl: dict) -> str:
    return "+".join(str(v) for v in rl.values())


def count_step_syncs(rl: dict, device: str | torch.device = "cpu", plant: Callable | None = None,
                     driver: bool = False) -> StepSyncs:
    """One RL step of the run config `rl` (RLConfig fields over BASE's) on `device`; `plant(loss)` runs inside every
    pass of the closure (a probe that the counter must see)."""
    cfg = RunConfig.model_validate({**BASE, "rl": {**BASE["rl"], **rl}})
    torch.manual_seed(0)
    model = build_model(cfg.model, TOKENIZER.vocab_size, 0).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    rule, mix = build_update_rule(cfg.rl), build_mix(cfg.rl)
    group = cfg.rl.group_size
    demos = [TOKENIZER.encode(d) for d in DEMOS] if mix.name != "none" else [[], []]
    own = iter(TOKENIZER.encode(t) for t in OWN)
    slots = [s for g in mix.rollout_slots([len(d) for d in demos], group, np.random.default_rng(0)) for s in g]
    # a slot's sequence: its forced prefix of the demonstration, then (if it generates) the policy's own tokens
    responses = [demos[i // group][:s.prefix] + (next(own) if s.generate else []) for i, s in enumerate(slots)]
    step = build_step_batch(model, None, mix, cfg.rl, [TOKENIZER.encode(p) for p in PROMPTS], demos, slots,
                            responses, [False] * len(responses), np.array(REWARDS))
    rule.on_rollout(step.signals)
    record: dict = {}
    closure = mixed_closure(model, opt, step, cfg.rl, cfg.rl.micro_batch_size, record)
    if plant is not None:
        inner = closure

        def closure():
            loss = inner()
            plant(loss)
            return loss
        closure.record = inner.record  # type: ignore[attr-defined]
    with witnessed_syncs(device, driver) as seen:
        stats = rule.step(params, opt, closure)
        row = {**stats.as_row(), **record}
    return StepSyncs(seen.counted, row["backward_passes"], row, seen.driver,
                     step.shaped is not None or step.sft_tokens > 0)
