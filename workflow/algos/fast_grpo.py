"""FAST-GRPO (Xiao & Gan, "Fast-Slow Thinking GRPO for Large Vision-Language Model Reasoning", NeurIPS 2025; code:
Mr-Loevan/FAST-GRPO): think as long as a problem needs. Three parts, each switched on by its own section of the run
config (rl.thinking_reward, rl.dynamic_kl, rl.slow2fast; workflow/config.py) so that each can be ablated, written
once here for both engines: plain numpy over one step's groups, no torch, no engine types.

    keep = slow2fast_keep(accuracy, progress, cfg)           # which groups the step trains on (Slow2Fast sampling)
    bonus, columns = ThinkingReward(cfg).bonus(...)          # added to the groups' rewards before the advantages
    beta = group_kl_coef(accuracy, cfg)                      # per group: the KL penalty's coefficient

`accuracy` is a group's share of correct rollouts (reward > 0). The official README publishes the ingredients but
not the exact shaping; the choices below are settings, and their defaults are ours (README, "FAST-GRPO"):

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

import json
import math
from pathlib import Path

import numpy as np


def group_accuracy(rewards: np.ndarray) -> np.ndarray:
    """[P, G] rewards -> [P] share of correct responses (reward > 0)."""
    return (np.asarray(rewards) > 0).mean(axis=1)


def slow2fast_keep(accuracy: np.ndarray, progress: float, cfg) -> np.ndarray:
    """Which groups the schedule's phase at `progress` (share of training done, 0..1) keeps: bool [P]."""
    low, high = cfg.slow if progress < cfg.switch else cfg.fast
    accuracy = np.asarray(accuracy, float)
    return (accuracy >= low) & (accuracy <= high)


def group_kl_coef(accuracy: np.ndarray, cfg) -> np.ndarray:
    """Per group, the KL penalty's coefficient: beta_min at accuracy 0, beta_max at 1, linear between."""
    return cfg.beta_min + (cfg.beta_max - cfg.beta_min) * np.asarray(accuracy, float)


def shape(x: np.ndarray, name: str) -> np.ndarray:
    x = np.clip(np.asarray(x, float), 0.0, 1.0)
    if name == "linear":
        return x
    if name == "cosine":
        return (1.0 - np.cos(math.pi * x)) / 2.0
    raise ValueError(f"unknown thinking_reward.shape {name!r}; known: linear, cosine")


def read_table(path: str | Path) -> dict[str, dict]:
    """A precomputed difficulty table: JSONL rows {"prompt": ..., "pass_rate": ..., "complexity": ...} (either
    estimate may be absent when the run estimates it online), keyed by the prompt's text."""
    table = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            if "prompt" not in row:
                raise ValueError(f"{path}:{n}: a difficulty-table row needs a 'prompt'")
            table[row["prompt"]] = row
    return table


class ThinkingReward:
    """The thinking reward's bonus for one step. `cfg` is rl.thinking_reward; the table (if it reads one) is read
    once, here."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.table = read_table(cfg.table) if cfg.table else {}

    def _from_table(self, prompts: list[str], field: str) -> np.ndarray:
        values = []
        for prompt in prompts:
            row = self.table.get(prompt)
            if row is None or row.get(field) is None:
                raise ValueError(f"rl.thinking_reward.table {self.cfg.table}: no {field} for the prompt "
                                 f"{prompt[:80]!r}")
            values.append(float(row[field]))
        return np.asarray(values)

    def difficulty(self, rewards: np.ndarray, lengths: np.ndarray, prompts: list[str],
                   prompt_lens: list[int]) -> np.ndarray:
        """[P] difficulty = (1 - pass rate) x complexity normalised by the batch's largest."""
        cfg = self.cfg
        pass_rate = self._from_table(prompts, "pass_rate") if cfg.pass_rate == "table" else group_accuracy(rewards)
        if cfg.complexity == "table":
            complexity = self._from_table(prompts, "complexity")
        elif cfg.complexity == "prompt_len":
            complexity = np.asarray(prompt_lens, float)
        else:
            complexity = np.asarray(lengths, float).mean(axis=1)
        top = complexity.max() if len(complexity) else 0.0
        return (1.0 - pass_rate) * (complexity / top if top > 0 else complexity)

    def bonus(self, rewards: np.ndarray, lengths: np.ndarray, max_len: int, prompts: list[str],
              prompt_lens: list[int]) -> tuple[np.ndarray, dict]:
        """[P, G] bonus for the responses (lengths in tokens, rewards their correctness) and the step's columns:
        thinking_bonus (mean over responses), easy_frac and hard_frac (shares of the step's prompts)."""
        rewards, lengths = np.asarray(rewards, float), np.asarray(lengths, float)
        d = self.difficulty(rewards, lengths, prompts, prompt_lens)
        threshold = np.percentile(d, self.cfg.percentile)
        easy, hard = d <= threshold, d > threshold
        correct, rel = rewards > 0, lengths / max_len
        out = np.zeros_like(rewards)
        brief = easy[:, None] & correct
        explore = hard[:, None] & ~correct
        out[brief] = self.cfg.scale * shape(1.0 - rel, self.cfg.shape)[brief]
        out[explore] = self.cfg.scale * shape(rel, self.cfg.shape)[explore]
        return out, {"thinking_bonus": float(out.mean()), "easy_frac": float(easy.mean()),
                     "hard_frac": float(hard.mean())}
