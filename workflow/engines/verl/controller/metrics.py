"""verl's per-step metrics -> our `train_steps` row, so a verl run lands in the same table as a local one.

Names on the left are verl 0.9's (trainer/ppo/metric_utils.py, the actor's worker metrics prefixed "actor/", our
StepStats reported by RuleTrainingWorker as "actor/rlsweep/<field>", the driver's gate as "rlsweep/<field>").
A column verl does not report for a run stays null, as in the local engine. `flops` follows workflow/algos/flops.py
from verl's `perf/total_num_tokens` (prompt + response tokens of the step's sequences, as the local engine's
`tokens`), the step's backward passes and the model's parameter count (param_count, read by the driver).
"""

from __future__ import annotations

from typing import Any

from workflow.algos.flops import rl_step_flops, sft_flops
from workflow.algos.mix import sft_loss_share
from workflow.methods.base import StepNumber
from workflow.engines.verl.contract import scalar
from workflow.methods.registry import step_numbers

# our column <- verl metric
_FROM_VERL = {
    "reward": "critic/score/mean",
    "entropy": "actor/entropy",
    "kl": "actor/kl_loss",
    "clip_frac": "actor/pg_clipfrac",
    "lr": "actor/lr",
    "response_len": "response_length/mean",
    "truncated_frac": "response_length/clip_ratio",
    "wall_s": "timing_s/step",
    "gen_s": "timing_s/gen",
    "update_s": "timing_s/update_actor",
    "tokens": "perf/total_num_tokens",
    "rollout_probs_diff_max": "training/rollout_probs_diff_max",
}
# our StepStats' own fields <- the workers' "actor/rlsweep/<field>" (the rule's step, workers/actor.py)
_FROM_RULE = ("loss", "grad_norm", "backward_passes", "optimizer_steps", "alpha")
_INTS = {"backward_passes", "optimizer_steps", "tokens", "rollouts"}
# the policy's own sequences only (an expert trace is not a rollout), as on the local engine
_MIX_OVERRIDES = ("reward", "response_len", "rollouts")
# the sft term's share is computed here from the workers' two terms (the local engine's step.mix_metrics)
_COMPUTED = ("sft_loss_share",)


def method_number(metrics: dict[str, Any], number: StepNumber) -> float | int | bool | None:
    """A method's own number (its card's `numbers`) in verl's step metrics: a rule's StepStats diagnostics come from
    the workers ("actor/rlsweep/<name>"), a mixed-policy method's or a part's columns from the driver
    ("rlsweep/mix/<name>", mix_hooks.py); cast to the number's type."""
    value = scalar(metrics.get(f"actor/rlsweep/{number.name}"))
    if value is None:
        value = scalar(metrics.get(f"rlsweep/mix/{number.name}"))
    if value is None or number.type == "float":
        return value
    return bool(value) if number.type == "bool" else int(round(value))


def _mix_columns(row: dict[str, Any], metrics: dict[str, Any]) -> int | None:
    """What the mixed-policy driver (rl.mix, FAST-GRPO's parts) changes in verl's own columns: the policy's own
    sequences' reward, length and count, the SFT term's share of the loss |sft| / (|rl| + |sft|), and `tokens` as
    the local engine counts them: verl's count without its padding rows, plus what was generated and then left out
    of verl's batch (rollouts a trace replaced, groups Slow2Fast dropped). Returns the tokens trained on (None when
    the driver did not run)."""
    if not any(k.startswith("rlsweep/mix/") for k in metrics):
        return None
    for col in _MIX_OVERRIDES:
        value = scalar(metrics.get(f"rlsweep/mix/{col}"))
        if value is not None:
            row[col] = value
    sft, rl = scalar(metrics.get("actor/rlsweep/sft_loss")), scalar(metrics.get("actor/rlsweep/rl_loss"))
    row["sft_loss_share"] = sft_loss_share(rl or 0.0, sft) if sft is not None else None
    if row.get("tokens") is None:
        return None
    count = {k: scalar(metrics.get(f"rlsweep/mix/{k}_tokens")) or 0.0
             for k in ("discarded", "dropped", "padding", "untrained")}
    in_batch = row["tokens"] - count["padding"]
    row["tokens"] = in_batch + count["discarded"] + count["dropped"]
    return int(in_batch - count["untrained"])


def train_steps_row(metrics: dict[str, Any], step: int, rollouts: int, n_params: int | None = None,
                    ref_model: bool = False) -> dict[str, Any]:
    """Our row of one RL step; `flops` needs the model's parameter count (null without it) and whether a reference
    model scored the batch (verl's use_kl_loss / use_kl_in_reward)."""
    row: dict[str, Any] = {"step": step, "rollouts": rollouts}
    for col, key in _FROM_VERL.items():
        row[col] = scalar(metrics.get(key))
    for col in _FROM_RULE:
        value = scalar(metrics.get(f"actor/rlsweep/{col}"))
        if value is None and col in ("loss", "grad_norm"):
            value = scalar(metrics.get(f"actor/{'pg_loss' if col == 'loss' else col}"))
        row[col] = value
    if row["backward_passes"] is None:  # verl's own step (no rule spec): one pass, one optimizer step
        row["backward_passes"] = row["optimizer_steps"] = 1
    for number, _ in step_numbers():
        if number.name not in _COMPUTED:
            row[number.name] = method_number(metrics, number)
    trained = _mix_columns(row, metrics)
    row["z"] = scalar(metrics.get("rlsweep/gate_z"))
    tripped = metrics.get("rlsweep/gate_tripped")
    row["gate_tripped"] = bool(tripped) if tripped is not None else None
    for col in _INTS:
        if row.get(col) is not None:
            row[col] = int(round(row[col]))
    if n_params is not None and row["tokens"] is not None:
        row["flops"] = rl_step_flops(n_params, row["tokens"], row["backward_passes"], trained_tokens=trained,
                                     ref_model=ref_model and trained != 0)
    _interleaved_sft(row, metrics, n_params)
    return row


def _interleaved_sft(row: dict[str, Any], metrics: dict[str, Any], n_params: int | None) -> None:
    """A step that took the method's interleaved SFT update too (ReLIFT): one more backward pass and optimizer
    step, its tokens, and their SFT FLOPs (6N per token: trained, not generated)."""
    tokens = scalar(metrics.get("rlsweep/mix/interleaved_sft_tokens"))
    if not tokens:
        return
    row["backward_passes"] += 1
    row["optimizer_steps"] += 1
    if row["tokens"] is not None:
        row["tokens"] += int(tokens)
    if row.get("flops") is not None:
        row["flops"] += sft_flops(n_params, int(tokens))
