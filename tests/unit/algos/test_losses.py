"""Losses: micro-batch invariance of every aggregation, GRPO pieces, the update-rule interface."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workflow.algos.losses import clipped_policy_loss, group_advantages, kl_k3, token_weights
from workflow.config import ModelConfig, TaskConfig
from workflow.engines.local import TOKENIZER, sft_accumulate, sft_batch
from workflow.engines.tiny_lm import build_model
from workflow.methods.grpo.algorithm import GRPOStep


def grads_of(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def sft_gradient(model, batch, micro) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    sft_accumulate(model, batch, micro)
    return grads_of(model).clone()


def test_sft_gradient_is_identical_for_1_2_4_micro_batches():
    model = build_model(ModelConfig(n_layers=2, hidden=64, n_heads=4), TOKENIZER.vocab_size, seed=0).double()
    # two-step solutions are much longer than addition ones, so micro-batches hold very different token counts
    batch = sft_batch(TaskConfig(two_step_fraction=0.5), seed=3, step=0, batch_size=16)
    lengths = batch["loss_mask"].sum(1)
    assert lengths.max() > 2 * lengths.min()
    full = sft_gradient(model, batch, None)
    for micro in (8, 4):
        g = sft_gradient(model, batch, micro)
        assert torch.linalg.vector_norm(g - full) / torch.linalg.vector_norm(full) <= 1e-6, micro

    # the bug this guards against: averaging per-micro-batch token means is measurably different
    model.zero_grad(set_to_none=True)
    for rows in (slice(0, 4), slice(4, 8), slice(8, 12), slice(12, 16)):
        sub = {k: v[rows] for k, v in batch.items()}
        sft_accumulate(model, sub, None)
    naive = grads_of(model) / 4
    assert torch.linalg.vector_norm(naive - full) / torch.linalg.vector_norm(full) > 1e-3


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "token-sum"])
def test_policy_loss_weights_are_micro_batch_invariant(mode):
    torch.manual_seed(0)
    mask = (torch.rand(12, 9) < 0.7).float()
    loss_tok = torch.randn(12, 9)
    w = token_weights(mask, mode, max_len=9)
    full = (loss_tok * w).sum()
    split = sum((loss_tok[s] * w[s]).sum() for s in (slice(0, 5), slice(5, 7), slice(7, 12)))
    assert torch.allclose(full, split, rtol=0, atol=1e-6)


def test_aggregation_modes_mean_what_they_say():
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    loss = torch.tensor([[1.0, 1.0, 1.0, 1.0], [5.0, 0.0, 0.0, 0.0]])
    assert float((loss * token_weights(mask, "token-mean")).sum()) == pytest.approx((4 + 5) / 5)
    assert float((loss * token_weights(mask, "seq-mean-token-mean")).sum()) == pytest.approx((1 + 5) / 2)
    assert float((loss * token_weights(mask, "token-sum", max_len=4)).sum()) == pytest.approx((4 + 5) / (2 * 4))


def test_group_advantages_std_and_dr_grpo():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    a = group_advantages(r, std_norm=True)
    assert torch.allclose(a[0], torch.tensor([1.0, -1.0, -1.0, 1.0]) * 0.5 / r[0].std(), atol=1e-5)
    assert torch.all(a[1] == 0)  # all-equal group: no signal
    assert torch.allclose(group_advantages(r, std_norm=False)[0], torch.tensor([0.5, -0.5, -0.5, 0.5]))


def test_clip_asymmetric_bounds_and_kl_estimator():
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[0.5, 0.9, 1.25, 1.5]]))  # ratios
    pos, clipped_pos = clipped_policy_loss(logp, old, torch.tensor([1.0]), 0.2, 0.28)
    assert torch.allclose(pos, -torch.tensor([[0.5, 0.9, 1.25, 1.28]]))  # upside capped at 1 + clip_high
    assert clipped_pos.tolist() == [[False, False, False, True]]
    neg, clipped_neg = clipped_policy_loss(logp, old, torch.tensor([-1.0]), 0.2, 0.28)
    assert torch.allclose(neg, torch.tensor([[0.8, 0.9, 1.25, 1.5]]))  # downside floored at 1 - clip_low
    assert clipped_neg.tolist() == [[True, False, False, False]]
    assert torch.all(kl_k3(logp, old) >= 0) and float(kl_k3(old, old).abs().max()) == 0.0


def test_grpo_step_is_one_backward_and_one_optimizer_step_with_clipping():
    w = torch.nn.Parameter(torch.tensor([3.0, -4.0]))
    opt = torch.optim.SGD([w], lr=0.1)
    calls = []

    def closure():
        calls.append(1)
        opt.zero_grad()
        loss = (w ** 2).sum() / 2  # gradient = w, norm 5
        loss.backward()
        return loss

    stats = GRPOStep(max_grad_norm=1.0).step([w], opt, closure)
    assert (stats.backward_passes, stats.optimizer_steps, len(calls)) == (1, 1, 1)
    assert stats.grad_norm == pytest.approx(5.0)
    assert np.allclose(w.detach().numpy(), [3.0 - 0.1 * 0.6, -4.0 + 0.1 * 0.8])  # clipped to unit norm
