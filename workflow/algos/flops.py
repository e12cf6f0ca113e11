"""The FLOPs model of `train_steps.flops`, one for both engines, so runs of different methods (SFT -> RL,
on-policy, mixed-policy) compare at equal compute in SQL.

The standard dense-transformer estimate (Kaplan et al. 2020), N = the model's parameter count, D = tokens:

    forward pass             2N per token
    backward pass            4N per token     (forward + backward = 6N)
    generation (KV cache)    2N per token     (prefill of the prompt and each sampled token alike)

Which tokens count: every token of the sequences the model processes, prompt included (the forward pass of
training runs over the prompt too; generation prefills it). Both engines log exactly these tokens in
`train_steps.tokens` (prompt + response of every sequence of the step, padding excluded).

What a step costs:

    SFT step                 6N x sequence tokens
    RL step                  2N x rollout tokens                              (generation)
                           + 6N x trained tokens x backward passes             (GRPO: 1; SFPO: K + 1; GXPO: 3)
                           + 2N x trained tokens, when a reference model scores them (KL penalty)
    trained tokens           rollout tokens + off-policy tokens               (off-policy traces: not generated)

so an on-policy GRPO step is 8N per token and an off-policy expert trace 6N per token. Not counted: recomputing the
behaviour policy's log-probs before the update (an engine's choice, not the method's: a rollout engine may return
them), attention's sequence-length term, the optimizer, and reward computation.
"""

from __future__ import annotations

FORWARD = 2.0  # FLOPs per parameter per token of a forward pass (a multiply and an add per weight)
BACKWARD = 4.0  # the backward pass: gradients w.r.t. activations and w.r.t. weights, a forward's worth each
GENERATE = FORWARD  # with a KV cache each token is one forward pass over one position (prefill: a forward)


def forward_flops(n_params: int, tokens: int) -> float:
    """2ND: one forward pass over `tokens` tokens (a reference model scoring a batch)."""
    return FORWARD * n_params * tokens


def generation_flops(n_params: int, tokens: int) -> float:
    """2ND: sampling sequences of `tokens` tokens in all (prompt prefill + sampled tokens) with a KV cache."""
    return GENERATE * n_params * tokens


def training_flops(n_params: int, tokens: int, passes: int = 1) -> float:
    """6ND per pass: forward + backward over `tokens` tokens, `passes` times (an update rule's backward passes)."""
    return (FORWARD + BACKWARD) * n_params * tokens * passes


def sft_flops(n_params: int, tokens: int) -> float:
    """An SFT step: 6ND over the batch's sequence tokens (prompt + demonstration)."""
    return training_flops(n_params, tokens)


def rl_step_flops(n_params: int, rollout_tokens: int, backward_passes: int, *, off_policy_tokens: int = 0,
                  trained_tokens: int | None = None, ref_model: bool = False) -> float:
    """An RL step: 2N per generated sequence token, 6N per trained token per backward pass, and 2N per trained token
    when a frozen reference model scores the batch for a KL penalty.

    rollout_tokens     tokens (prompt + response) of the sequences the policy sampled this step
    backward_passes    forward + backward passes over the batch (StepStats.backward_passes: SFPO/GXPO count theirs)
    off_policy_tokens  tokens of sequences trained on but not generated (a mixed-policy method's expert traces)
    trained_tokens     the tokens trained on, when not rollout + off-policy tokens (HPT trains a group's
                       demonstration instead of its rollouts)
    """
    trained = rollout_tokens + off_policy_tokens if trained_tokens is None else trained_tokens
    flops = generation_flops(n_params, rollout_tokens) + training_flops(n_params, trained, backward_passes)
    if ref_model:
        flops += forward_flops(n_params, trained)
    return flops
