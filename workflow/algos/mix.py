"""The mixed-policy interface: how a method brings expert demonstrations into an RL step. Written once, run by both
engines; a method only decides WHAT goes into the step (which sequences, which loss on which tokens), the engine
does the sampling, scoring and training. Plain Python and numpy: no torch, no engine types.

Call order, once per RL step with P prompts and groups of G (`demo_lens[p]` = tokens of prompt p's demonstration):

    slots = mix.rollout_slots(demo_lens, G, rng, progress)  # [P][G] Slot: what each sequence of a group is
    ... the engine samples the slots, scores every sequence: rewards [P, G] ...
    plan = mix.loss_plan(rewards, signals)              # -> LossPlan: which rows train with which loss and weight
    ... the update rule steps on the mixed loss (workflow/algos/losses.py: mixed_token_loss) ...
    due = mix.after_step(items, rewards)                # -> items to take an interleaved SFT step on now ([]: none)

and around the loop: `state_dict()` when checkpointing, `load_state_dict()` when resuming (ReLIFT's buffer).

`progress` is the share of training done before this step (step / total steps: Prefix-RFT's schedule). `signals`
are what the rollout measured: "entropy" (mean token entropy of the on-policy tokens), "advantages" ([P * G], the
group advantages over the mixed groups), "seq_entropy" ([P * G], each sequence's mean token entropy) and, for a
method that sets `needs_demo_entropy`, "demo_entropy" ([P], the policy's mean token entropy on each demonstration).
`items` are whatever the engine needs to rebuild a prompt's demonstration later (the local engine: the problem's
prompt and solution text); they must be JSON-serialisable, as they go into checkpoints.

The mixed loss of a step, for any method (every weight computed once over the whole batch, so micro-batching never
changes the gradient):

    L = sum over RL tokens of  w_rl x rl_scale[seq] x ( clipped PPO loss            on-policy tokens
                                                        -f(pi) A, f = pi/(pi+lam)    off-policy (expert) tokens,
                                                                                     off_policy_loss "shaped" )
      + sum over SFT tokens of w_sft x sft_weight[prompt] x (-log pi)

with w_rl the rl.loss_agg weights over the RL rows and w_sft = 1 / (SFT tokens of the batch): a token-mean SFT loss.

A new method: subclass MixedPolicy, its constructor taking the fields of its settings section as keyword arguments,
and register it once as a method (workflow/methods/: a folder with its card and settings, workflow/methods/luffy/
for one; or `@register_mix("name")` for a method without settings).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np


@dataclass(frozen=True)
class Slot:
    """One sequence of a group: the first `prefix` tokens of the prompt's demonstration, forced (off-policy), then the
    policy's own continuation if `generate`. (0, True) is an on-policy rollout; (len(demo), False) the expert
    trace itself."""

    prefix: int = 0
    generate: bool = True


ON_POLICY = Slot()


@dataclass
class LossPlan:
    """Which sequences of the step train with which loss. Rollout rows are indexed p * G + g."""

    rl_rows: np.ndarray  # [P * G] bool: the rollout is in the RL loss (HPT drops the groups it switches to SFT)
    rl_scale: np.ndarray  # [P * G] float: multiplier of its RL loss
    sft_weight: np.ndarray  # [P] float: weight of the SFT loss on prompt p's demonstration (0: not trained on)
    advantages: np.ndarray | None = None  # [P * G]: replaces the group advantages (SRFT's signed weights)
    metrics: dict[str, float] = field(default_factory=dict)  # per-step columns of train_steps

    @classmethod
    def on_policy(cls, n_prompts: int, group_size: int) -> "LossPlan":
        n = n_prompts * group_size
        return cls(np.ones(n, bool), np.ones(n), np.zeros(n_prompts))


def step_columns(plan: LossPlan, rl_tokens: float, off_policy_tokens: float, sft_tokens: float) -> dict:
    """The mixed-policy columns of a step (docs/methods.md), the same on both engines: expert tokens / RL tokens,
    SFT tokens / trained tokens, the mean SFT weight of the prompts trained with SFT (None: none was), the method's
    own."""
    weights = np.asarray(plan.sft_weight, float)
    weights = weights[weights > 0]
    return {"off_policy_frac": off_policy_tokens / max(rl_tokens, 1.0),
            "sft_frac": sft_tokens / max(rl_tokens + sft_tokens, 1.0),
            "sft_weight": float(weights.mean()) if len(weights) else None, **plan.metrics}


def sft_loss_share(rl_term: float, sft_term: float) -> float:
    """|SFT term| / (|RL term| + |SFT term|) of a step's loss (0 when both are 0)."""
    total = abs(rl_term) + abs(sft_term)
    return abs(sft_term) / total if total > 0 else 0.0


class MixedPolicy:
    """Plain on-policy RL: every slot a rollout, every rollout in the RL loss, no SFT term. The base of every
    method, and itself the method `none`."""

    name: ClassVar[str] = ""  # the name it is registered under (workflow/methods/registry.py)
    trains_on_demonstrations: ClassVar[bool] = False  # loss_plan may give a prompt an SFT weight
    needs_demo_entropy: ClassVar[bool] = False  # loss_plan reads signals["demo_entropy"]
    interleaves_sft: ClassVar[bool] = False  # after_step may ask for SFT steps of its own (ReLIFT)
    # how off-policy tokens train: "shaped" (-f(pi) A, LUFFY) or "clip" (the clipped ratio against the policy's own
    # probability at rollout time, as on-policy tokens; Prefix-RFT)
    off_policy_loss: ClassVar[str] = "shaped"
    lam: float = 0.1  # f(pi) = pi / (pi + lam) (LUFFY's default)
    # keep the advantage of only this top share of off-policy tokens by policy entropy (the rest: advantage 0, still
    # counted in the token mean); None: every token keeps it (Prefix-RFT: 0.2)
    off_policy_entropy_top: float | None = None

    def rollout_slots(self, demo_lens: list[int], group_size: int, rng: np.random.Generator,
                      progress: float = 0.0) -> list[list[Slot]]:
        return [[ON_POLICY] * group_size for _ in demo_lens]

    def loss_plan(self, rewards: np.ndarray, signals: dict[str, Any]) -> LossPlan:
        return LossPlan.on_policy(*rewards.shape)

    def after_step(self, items: list[Any], rewards: np.ndarray) -> list[Any]:
        return []

    def step_metrics(self) -> dict[str, float]:
        """Columns of train_steps that the method's state gives after the step (ReLIFT's buffer size)."""
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
