"""Synthetic arithmetic with \\boxed{} answers: the demo task that trains honestly on 2 CPU cores.

Two kinds of problem, mixed by `two_step_fraction`:
  addition  `Q:37+48=?A:`    -> `\\boxed{85}`
  two-step  `Q:(13+4)*5=?A:` -> `13+4=17,17*5=85\\boxed{85}`
The pools are fixed (about 8k + 6k problems); `split_seed` alone decides which `n_heldout` problems are held out,
so every run of a sweep trains and evaluates on the same split, disjoint by construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from workflow.benchmarks.scoring import score_exact


class TaskConfig(Protocol):
    """The task settings the split reads (workflow.config.TaskConfig has them; this floor imports no config). It
    must be hashable: the split is cached per settings."""
    split_seed: int
    n_heldout: int
    two_step_fraction: float


@dataclass(frozen=True)
class Problem:
    id: str
    prompt: str
    solution: str  # the SFT target: worked steps (two-step only) + \boxed{answer}
    answer: str
    kind: str


def _addition() -> list[Problem]:
    return [Problem(f"add-{a}-{b}", f"Q:{a}+{b}=?A:", f"\\boxed{{{a + b}}}", str(a + b), "addition")
            for a in range(10, 100) for b in range(10, 100)]


def _two_step() -> list[Problem]:
    out = []
    for a in range(1, 21):
        for b in range(1, 21):
            for op in "+-":
                if op == "-" and a < b:
                    continue
                first = a + b if op == "+" else a - b
                for c in range(2, 10):
                    ans = first * c
                    out.append(Problem(f"two-{a}{'p' if op == '+' else 'm'}{b}x{c}",
                                       f"Q:({a}{op}{b})*{c}=?A:",
                                       f"{a}{op}{b}={first},{first}*{c}={ans}\\boxed{{{ans}}}", str(ans), "two_step"))
    return out


@dataclass(frozen=True)
class Split:
    train: tuple[Problem, ...]
    heldout: tuple[Problem, ...]
    train_by_kind: dict[str, tuple[Problem, ...]]


@lru_cache(maxsize=8)
def split(cfg: TaskConfig) -> Split:
    """Held-out problems are drawn per kind in the configured mix; the rest is training data."""
    rng = np.random.default_rng(cfg.split_seed)
    pools = {"addition": _addition(), "two_step": _two_step()}
    n_two = int(round(cfg.n_heldout * cfg.two_step_fraction))
    want = {"two_step": n_two, "addition": cfg.n_heldout - n_two}
    train: list[Problem] = []
    heldout: list[Problem] = []
    by_kind: dict[str, tuple[Problem, ...]] = {}
    for kind, pool in pools.items():
        order = rng.permutation(len(pool))
        if want[kind] > len(pool) // 2:
            raise ValueError(f"task.n_heldout asks for {want[kind]} {kind} problems; the pool has {len(pool)}")
        heldout += [pool[i] for i in order[: want[kind]]]
        by_kind[kind] = tuple(pool[i] for i in order[want[kind]:])
        train += by_kind[kind]
    return Split(tuple(train), tuple(heldout), by_kind)


def sample_train(cfg: TaskConfig, rng: np.random.Generator, n: int) -> list[Problem]:
    """n training problems, each kind drawn with probability two_step_fraction, uniformly within the kind."""
    by_kind = split(cfg).train_by_kind
    kinds = rng.random(n) < cfg.two_step_fraction
    out = []
    for is_two in kinds:
        pool = by_kind["two_step" if is_two else "addition"]
        out.append(pool[int(rng.integers(len(pool)))])
    return out


STYLES = ("equation", "qa", "boxed")


def document(p: Problem, style: str) -> str:
    """A problem as pretraining text, in one of the ways math text writes it:
      equation  `37+48=85`, `(13+4)*5=85`
      qa        `Q:37+48=?A:85`: the task's question and its answer, plainly (no \\boxed{}, no worked steps)
      boxed     `37+48=\\boxed{85}`: the answer in LaTeX's box, never after the task's question."""
    question = p.prompt.removeprefix("Q:").removesuffix("=?A:")
    if style == "equation":
        return f"{question}={p.answer}"
    if style == "qa":
        return f"Q:{question}=?A:{p.answer}"
    if style == "boxed":
        return f"{question}=\\boxed{{{p.answer}}}"
    raise ValueError(f"unknown document style {style!r}; known: {', '.join(STYLES)}")


def reward(response: str, answer: str) -> float:
    """The RL reward: 1.0 if the last \\boxed{} in the response equals the answer exactly, else 0.0 (the
    `arithmetic` benchmark scores with the same rule)."""
    return 1.0 if score_exact(response, answer).correct else 0.0
