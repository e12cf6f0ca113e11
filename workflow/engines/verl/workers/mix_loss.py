"""The mixed-policy loss inside verl's workers, in place of verl's ppo_loss for a batch the driver planned
(controller/mix_hooks.py puts the per-token fields below into verl's TransferQueue; they reach the worker's TensorDict with
the rest of the row).

Why not a policy loss registered with verl's `register_policy_loss`: verl 0.9's ppo_loss hands a policy loss only
(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights) and aggregates it
with its own token count; the off-policy mask, the SFT rows and our batch-wide weights never reach it. The worker's
engine step receives the loss function instead (RuleTrainingWorker), so it swaps in `mixed_loss` there.

The loss of a micro-batch is workflow/algos/mix.py's sum over its tokens with the weights the driver computed over
the WHOLE step batch (mix_batch.token_fields), so the micro-batches' gradients add up to the full batch's for any
split. FSDP averages gradients over the data-parallel ranks; multiplying by dp_size (as verl's own losses do)
turns that average back into the sum over ranks: the global loss on any number of ranks.
"""

from __future__ import annotations

import torch
from verl.trainer.ppo.core_algos import kl_penalty
from verl.utils import tensordict_utils as tu
from verl.utils.metric import AggregationType, Metric
from verl.workers.utils.padding import no_padding_2_padding

from workflow.algos.losses import mixed_token_loss, sft_loss
# the batch's fields the driver plans (MIX_KEY's entry, the per-token weights) are the contract's
from workflow.engines.verl.contract import FIELDS, KL_COEF, LR_SCALE, MIX_KEY, SHAPED, W_KL, W_RL, W_SFT  # noqa: F401


def planned(data) -> dict | None:
    """The driver's mix entry of a batch (None: not a mixed-policy batch; verl's ppo_loss applies)."""
    return tu.get_non_tensor_data(data=data, key=MIX_KEY, default=None)


def mixed_loss(config, model_output, data, dp_group=None, lam: float = 0.1):
    """verl's loss-function signature (config = the actor's ActorConfig); returns the loss and verl Metrics."""
    if config.entropy_coeff:
        raise ValueError("the mixed-policy loss has no entropy bonus (actor.entropy_coeff must be 0)")
    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    dp_size = data["dp_size"]
    fields = ["response_mask", "old_log_probs", "advantages", *FIELDS]
    if config.use_kl_loss:
        fields.append("ref_log_prob")
    d = data.select(*fields).to_padded_tensor()
    mask = d["response_mask"].bool()
    shaped = d[SHAPED].bool() & mask
    adv = d["advantages"]
    per_token, clipped = mixed_token_loss(log_prob, d["old_log_probs"], adv, shaped,
                                          config.clip_ratio_low, config.clip_ratio_high, lam)
    # verl's own GRPO step (compute_policy_loss_vanilla) also bounds a negative-advantage token's loss by
    # -A x clip_ratio_c (dual-clip PPO); on-policy tokens keep that, so rl.mix none and a mix agree on them
    dual = torch.minimum(per_token, -adv * config.get("clip_ratio_c", 3.0))
    per_token = torch.where((adv < 0) & ~shaped, dual, per_token)
    rl = (per_token * d[W_RL]).sum()
    sft = sft_loss(log_prob, d[W_SFT])
    loss = rl + sft
    metrics = {}
    if config.use_kl_loss:
        kld = kl_penalty(logprob=log_prob, ref_logprob=d["ref_log_prob"], kl_penalty=config.kl_loss_type)
        kl = (kld * d[W_KL]).sum()  # the KL itself (the column), its coefficients per token in the loss
        loss = loss + (kld * d[W_KL] * d[KL_COEF]).sum()
        metrics["kl_loss"] = Metric(value=kl.detach() * dp_size, aggregation=AggregationType.SUM)
    on_policy = mask & ~shaped & (d[W_RL] > 0)
    metrics["actor/pg_clipfrac"] = Metric(
        value=float((clipped & on_policy).sum()) / max(float(on_policy.sum()), 1.0), aggregation=AggregationType.MEAN)
    # partial sums of the global loss: SUM over micro-batches (x dp_size: verl averages them over ranks)
    metrics["actor/pg_loss"] = Metric(value=(rl + sft).detach() * dp_size, aggregation=AggregationType.SUM)
    metrics["rlsweep/sft_loss"] = Metric(value=sft.detach() * dp_size, aggregation=AggregationType.SUM)
    metrics["rlsweep/rl_loss"] = Metric(value=rl.detach() * dp_size, aggregation=AggregationType.SUM)
    return loss * dp_size, metrics
