"""FAST-GRPO (Xiao & Gan, "Fast-Slow Thinking GRPO for Large Vision-Language Model Reasoning", NeurIPS 2025; code:
Mr-Loevan/FAST-GRPO): think as long as a problem needs. Three parts, each switched on by its own section of the run
config (rl.thinking_reward, rl.dynamic_kl, rl.slow2fast) so that each can be ablated. Each is a method of its own
(workflow/methods/<part>/: its settings, card and algorithm), a workflow.algos.part.Part written once for both
engines: plain numpy over one step's groups, no torch, no engine types. This module holds what they share.

    Slow2Fast.keep(accuracy, progress)                       # which groups the step trains on (Slow2Fast sampling)
    ThinkingReward.bonus(rewards, lengths, ...)              # added to the groups' rewards before the advantages
    DynamicKL.kl_coef(accuracy)                              # per group: the KL penalty's coefficient

`accuracy` is a group's share of correct rollouts (reward > 0). The official README publishes the ingredients but
not the exact shaping; the choices below are settings, and their defaults are ours (docs/methods.md, "FAST-GRPO"):

- Thinking reward. difficulty_p = (1 - pass_rate_p) x complexity_p, with pass rate and complexity either
  estimated online from the step (pass rate: the group's accuracy; complexity: the group's mean response length,
  or the prompt's length, divided by the largest in the batch) or read from a precomputed table. Prompts at or
  below the `percentile`-th difficulty of the batch are easy, above it hard. A correct response to an easy prompt
  earns scale x g(1 - L / max_len) (the shorter, the more), a wrong response to a hard prompt scale x g(L / max_len)
  (the longer, the more: exploration); every other response 0. g is the `shape`: linear g(x) = x or cosine
  g(x) = (1 - cos(pi x)) / 2. With scale < 1 a wrong answer never outscores a right one.
- Dynamic KL (`kl_type: group_accuracy_based`): beta_p = beta_min + (beta_max - beta_min) x accuracy_p on the
  low-variance (k3) estimator: groups the policy already solves stay near the reference, groups it fails on may
  move away from it (explore).
- Slow2Fast sampling: during the first `switch` share of training keep the groups whose accuracy lies in `slow`
  ([0.3, 0.99]: the medium-to-hard ones, slow thinking), after it those in `fast` ([0.01, 0.7]); bounds inclusive.
  The engine either samples more prompts until the step is full again (`refill: resample`, as DAPO's dynamic
  sampling, at most `max_rounds` extra rounds) or trains on the groups kept (`refill: shrink`).
"""

from __future__ import annotations

import numpy as np


def group_accuracy(rewards: np.ndarray) -> np.ndarray:
    """[P, G] rewards -> [P] share of correct responses (reward > 0)."""
    return (np.asarray(rewards) > 0).mean(axis=1)
