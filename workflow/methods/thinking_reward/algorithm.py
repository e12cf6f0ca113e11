"""The thinking reward's bonus (workflow/algos/fast_grpo.py states the shaping): a correct answer to an easy prompt
earns more the shorter it is, a wrong answer to a hard prompt more the longer it is."""

from __future__ import annotations

import json
import math
from functools import cached_property
from pathlib import Path

import numpy as np

from workflow.algos.fast_grpo import group_accuracy
from workflow.algos.part import Part


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


class ThinkingReward(Part):
    """The thinking reward's bonus for one step. `cfg` is rl.thinking_reward; the table (if it reads one) is read
    once, when first needed."""

    shapes_rewards = True

    @property
    def reads_prompt_text(self) -> bool:  # the table is keyed by the prompts' texts
        return "table" in (self.cfg.pass_rate, self.cfg.complexity)

    @cached_property
    def table(self) -> dict[str, dict]:
        return read_table(self.cfg.table) if self.cfg.table else {}

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
