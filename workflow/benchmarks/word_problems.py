"""Generated grade-school word problems with \\boxed{} answers: a task a small real model (rlsweep:smollm2-135m)
can partly solve, in plain English through its chat template.

Five kinds, from one operation on small numbers to two operations:
  add        Mia has 7 marbles. She finds 5 more. How many marbles does Mia have now?          -> 12
  sub        Leo had 15 stickers and gave 6 of them away. How many stickers does Leo have left? -> 9
  mul        A box holds 4 pencils. How many pencils are in 6 boxes?                          -> 24
  div        Ava shares 18 cookies equally among 3 friends. How many cookies does each get?  -> 6
  two_step   Sam has 9 apples, buys 4 more and then eats 3. How many apples does Sam have?   -> 10
Each comes with a worked solution ("9 + 4 = 13, then 13 - 3 = 10. The answer is \\boxed{10}."), which is what SFT
trains on.

A problem is its (kind, numbers); the name and the object only dress it. The held-out set (the `word_problems`
benchmark) and the training set (`task.datasets: [{name: word_problems}]`) are drawn from disjoint sets of
(kind, numbers), so no training problem is a re-worded test problem. Everything is fixed by SPLIT_SEED: every
machine generates the same problems.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

SPLIT_SEED = 20261125
N_HELDOUT = 200  # the benchmark: 40 of each kind
NAMES = ("Mia", "Leo", "Ava", "Sam", "Noah", "Emma", "Liam", "Zoe", "Omar", "Lena", "Ivan", "Aisha", "Ben", "Chloe",
         "Ravi", "Nora")
OBJECTS = ("apples", "marbles", "pencils", "stickers", "cookies", "books", "shells", "cards", "coins", "balloons")
CONTAINERS = ("box", "bag", "jar", "basket", "pack")
KINDS = ("add", "sub", "mul", "div", "two_step")


@dataclass(frozen=True)
class WordProblem:
    id: str  # <kind>-<numbers>: the problem's identity, whatever its wording
    kind: str
    question: str
    answer: str
    solution: str  # worked steps ending in "The answer is \boxed{answer}."


def _numbers(kind: str) -> list[tuple[int, ...]]:
    """Every (numbers) of a kind: small enough for a grade-school answer, large enough to leave pools to split."""
    if kind == "add":
        return [(a, b) for a in range(2, 30) for b in range(2, 30)]
    if kind == "sub":
        return [(a, b) for a in range(5, 40) for b in range(1, a)]
    if kind == "mul":
        return [(a, b) for a in range(2, 13) for b in range(2, 13)]
    if kind == "div":
        return [(q * b, b) for q in range(2, 13) for b in range(2, 11)]
    if kind == "two_step":
        return [(a, b, c) for a in range(3, 20) for b in range(2, 12) for c in range(1, a + b) if c <= a]
    raise ValueError(f"unknown word-problem kind {kind!r}; known: {', '.join(KINDS)}")


def _dress(kind: str, nums: tuple[int, ...], rng: np.random.Generator) -> WordProblem:
    name, obj = NAMES[rng.integers(len(NAMES))], OBJECTS[rng.integers(len(OBJECTS))]
    box = CONTAINERS[rng.integers(len(CONTAINERS))]
    if kind == "add":
        a, b = nums
        ans, q = a + b, f"{name} has {a} {obj}. {name} finds {b} more. How many {obj} does {name} have now?"
        steps = f"{a} + {b} = {ans}."
    elif kind == "sub":
        a, b = nums
        ans = a - b
        q = f"{name} had {a} {obj} and gave {b} of them away. How many {obj} does {name} have left?"
        steps = f"{a} - {b} = {ans}."
    elif kind == "mul":
        a, b = nums
        ans, q = a * b, f"A {box} holds {a} {obj}. How many {obj} are in {b} such {box}s?"
        steps = f"{b} x {a} = {ans}."
    elif kind == "div":
        total, b = nums
        ans = total // b
        q = f"{name} shares {total} {obj} equally among {b} friends. How many {obj} does each friend get?"
        steps = f"{total} / {b} = {ans}."
    else:
        a, b, c = nums
        ans = a + b - c
        q = f"{name} has {a} {obj}, gets {b} more and then gives {c} away. How many {obj} does {name} have now?"
        steps = f"{a} + {b} = {a + b}, then {a + b} - {c} = {ans}."
    return WordProblem(f"{kind}-{'-'.join(map(str, nums))}", kind, q, str(ans),
                       f"{steps} The answer is \\boxed{{{ans}}}.")


@dataclass(frozen=True)
class WordSplit:
    train: tuple[WordProblem, ...]
    heldout: tuple[WordProblem, ...]


@lru_cache(maxsize=1)
def split() -> WordSplit:
    """N_HELDOUT held-out problems (an equal share of each kind) and every other (kind, numbers) for training, each
    dressed once; both in a fixed random order."""
    rng = np.random.default_rng(SPLIT_SEED)
    per_kind = N_HELDOUT // len(KINDS)
    train: list[WordProblem] = []
    heldout: list[WordProblem] = []
    for kind in KINDS:
        pool = _numbers(kind)
        order = rng.permutation(len(pool))
        dressed = [_dress(kind, pool[i], rng) for i in order]
        heldout += dressed[:per_kind]
        train += dressed[per_kind:]
    train_order, heldout_order = rng.permutation(len(train)), rng.permutation(len(heldout))
    return WordSplit(tuple(train[i] for i in train_order), tuple(heldout[i] for i in heldout_order))
