"""Our update rules (workflow/algos/rule.py) around verl 0.9's training engine.

verl's own step is `engine.train_batch`: optimizer_zero_grad -> forward_backward_batch (ppo_loss, a true global
token-mean over all data-parallel ranks) -> optimizer_step (clip the global grad norm in place, step). Here the
same pieces become our interface: the closure is zero_grad + forward_backward_batch on the SAME batch, the
optimizer is the engine's own torch optimizer over the FSDP2-sharded parameters, and the rule clips and steps
(clip_and_step: the same formula, min(1, max_norm / (norm + 1e-6)), with the norm all-reduced over the mesh).
GRPOStep is therefore verl's own step; SFPO and GXPO take their extra passes on the same batch.

This is the piece the verl TrainingWorker subclass runs in every rank; the gates are decided on the driver (the
worker feeds them the same scalars on every rank, so every rank also agrees).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from workflow.algos.rule import StepStats, UpdateRule


def trainable_params(engine) -> list[torch.Tensor]:
    return [p for p in engine.module.parameters() if p.requires_grad]


def rule_train_batch(engine, data, loss_function: Callable, rule: UpdateRule) -> tuple[Any, StepStats]:
    """One training step of `rule` on one mini-batch `data` (verl's no-padding TensorDict). Returns verl's
    outputs of the FIRST forward/backward (at the rollout policy, so metrics compare across rules) and the
    rule's StepStats. Call it inside `engine.train_mode()`; the LR scheduler is the caller's, once per step."""
    first: dict[str, Any] = {}
    # forward_backward_batch annotates its input (token counts, micro-batch split): a rule's every pass gets a fresh
    # copy, but a single pass (GRPO, a gated-off rule) the batch itself, as verl's own step does (a copy of a verl
    # batch, nested tensors and all, took ~28 ms of a ~270 ms update on CPU: bench/verl_seam.py --profile)
    fresh = not rule.single_pass()

    def closure() -> torch.Tensor:
        engine.optimizer_zero_grad()
        out = engine.forward_backward_batch(data.copy() if fresh else data, loss_function, forward_only=False)
        first.setdefault("outputs", out)
        return _global_loss(out, engine)

    stats = rule.step(trainable_params(engine), engine.optimizer, closure)
    return first["outputs"], stats


def _global_loss(outputs: Any, engine) -> torch.Tensor:
    """The batch's loss, the same number on every rank: verl's pg_loss Metric of this rank (aggregated over its
    micro-batches the way verl does), averaged over the data-parallel ranks. Each rank's ppo_loss is already
    normalised by the global token count times dp_size, so the mean over ranks is the global token-mean loss."""
    metric = outputs["metrics"].get("actor/pg_loss") if "metrics" in outputs else None
    # on the parameters' device: NCCL all-reduces only CUDA tensors (gloo, the CPU chain's backend, CPU ones)
    device = next((p.device for p in trainable_params(engine)), torch.device("cpu"))
    if metric is None:
        return torch.zeros((), dtype=torch.float64, device=device)
    local = torch.tensor(float(metric.aggregate() if hasattr(metric, "aggregate") else metric), dtype=torch.float64,
                         device=device)
    group = engine.get_data_parallel_group()
    if torch.distributed.is_initialized() and torch.distributed.get_world_size(group) > 1:
        torch.distributed.all_reduce(local, group=group)
        local /= torch.distributed.get_world_size(group)
    return local
