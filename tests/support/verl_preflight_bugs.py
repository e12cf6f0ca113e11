"""The SFT-then-RL paper's two silent bugs, planted into verl's own engine for tests/verl/test_verl_preflight.py. The
preflight runs verl in torchrun children, so the test names these ("verl_preflight_bugs:mean_of_micro_batch_means")
and the children import them (the test puts this folder on PYTHONPATH)."""

from __future__ import annotations

import torch


def mean_of_micro_batch_means(config, model_output, data, dp_group=None):
    """verl's sft_loss (no-padding layout) with the classic accumulation bug: each micro-batch's own token mean,
    weighted by its share of the rank's sequences (a mean of per-micro-batch means, and so of per-rank means),
    instead of the sum over the micro-batch divided by the global token count."""
    log_prob = model_output["log_probs"].values()
    mask = torch.roll(data["loss_mask"].values(), shifts=-1, dims=0)  # as sft_loss: aligned with log_prob
    rows_per_rank = data["global_batch_size"] / data["dp_size"]
    share = data["loss_mask"].size(0) / rows_per_rank
    return -(log_prob * mask).sum() / mask.sum() * share * data["dp_size"], {}


def first_micro_batch_only(engine) -> None:
    """The CPU-offload bug: the optimizer step applies the gradient of the first micro-batch only. Simulated at the
    engine's level (FSDP2 holds a micro-batch's gradient unsharded until the last one, so it cannot be copied from
    .grad): the step redoes the first micro-batch's forward/backward alone, then steps."""
    forward_backward, forward_step, step = engine.forward_backward_batch, engine.forward_step, engine.optimizer_step
    seen: list = []

    def recording_forward_backward(data, loss_function, forward_only=False):
        seen.clear()
        return forward_backward(data, loss_function, forward_only=forward_only)

    def recording_forward_step(micro_batch, loss_function, forward_only):
        if not forward_only:
            seen.append((micro_batch, loss_function))
        return forward_step(micro_batch, loss_function=loss_function, forward_only=forward_only)

    def stepping_on_the_first():
        if len(seen) > 1:
            micro_batch, loss_function = seen[0]
            engine.optimizer_zero_grad()
            loss, _ = forward_step(micro_batch, loss_function=loss_function, forward_only=False)
            loss.backward()
        seen.clear()
        return step()

    engine.forward_backward_batch = recording_forward_backward
    engine.forward_step = recording_forward_step
    engine.optimizer_step = stepping_on_the_first


def mixed_mean_of_micro_batch_means(config, model_output, data, dp_group=None, lam: float = 0.1):
    """Our mixed-policy loss (mix_loss.mixed_loss) with the same bug: each micro-batch's weighted sum divided by the
    micro-batch's own total weight (its mean), weighted by its share of the rank's sequences, instead of the
    weights the driver computed over the whole batch."""
    from workflow.engines.verl.workers.mix_loss import W_RL, W_SFT, mixed_loss
    loss, metrics = mixed_loss(config, model_output, data, dp_group, lam=lam)
    weights = data.select(W_RL, W_SFT).to_padded_tensor()
    own = float(weights[W_RL].abs().sum() + weights[W_SFT].sum())
    share = data["response_mask"].size(0) / (data["global_batch_size"] / data["dp_size"])
    return loss / own * share, metrics
