"""Simulated designs: the test of the test, with scores drawn from known distributions instead of training.

A design of L settings runs rounds of n seeds per setting still in play until its test stops it; each seed's score
is drawn from its setting's distribution. Over many designs this measures what the guarantee is about:
- the family-wise error under the null (every setting the same): the share of designs that called any pair
  different, with its binomial Monte Carlo error;
- under an alternative, the power (the share of truly different pairs called different, in the right direction)
  and the seeds the design spent, against a fixed design (one look) of the same error and power.

bench/seeds_on_demand.py prints the figures; tests/unit/design/test_simulate.py runs a small version in CI, where a
planted fault (RepeatedFixedTest: a fixed-sample test at every look at the nominal level) must fail the check.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from workflow.design.adastop import CONTINUE, EQUAL, LARGER, SMALLER, Comparator, Pair

# a setting's score distribution: (rng, how many) -> scores
Scores = Callable[[np.random.Generator, int], np.ndarray]


def normal(mean: float, sd: float = 1.0) -> Scores:
    return lambda rng, size: rng.normal(mean, sd, size)


def collapsing(mean: float, sd: float = 1.0, collapse: float = 0.2, drop: float = 3.0) -> Scores:
    """RL's "some seeds collapse": a two-peaked distribution, the share `collapse` of seeds `drop` sds below the
    rest (each peak of spread 0.3 sd); `mean` is the healthy seeds' mean."""
    def draw(rng: np.random.Generator, size: int) -> np.ndarray:
        down = rng.random(size) < collapse
        return rng.normal(mean, 0.3 * sd, size) - down * drop * sd
    return draw


class SequentialTest(Protocol):
    """What a simulated design needs of a test (Comparator's interface)."""

    decisions: dict[Pair, str]
    finished: bool
    in_play: list[str]

    def look(self, values: dict[str, Sequence[float]]) -> dict[Pair, str]: ...


class RepeatedFixedTest:
    """The fault the sequential test exists to avoid: after every round, each open pair gets a fixed-sample
    two-sided permutation test of all its runs so far at the nominal level, with no correction for the looks or the
    pairs. Its family-wise error exceeds the level (with five looks at 5 %, about 14 % for one pair)."""

    def __init__(self, settings: list[str], n: int, K: int, alpha: float, paths: int = 2000, seed: int = 0):
        self.settings, self.n, self.K, self.alpha, self.paths = settings, n, K, alpha, paths
        self.decisions = {p: CONTINUE for p in itertools.combinations(settings, 2)}
        self.rng = np.random.default_rng(seed)
        self.round = 0

    @property
    def open_pairs(self) -> list[Pair]:
        return [p for p, d in self.decisions.items() if d == CONTINUE]

    @property
    def in_play(self) -> list[str]:
        wanted = {s for p in self.open_pairs for s in p}
        return [s for s in self.settings if s in wanted]

    @property
    def finished(self) -> bool:
        return not self.open_pairs

    def look(self, values: dict[str, Sequence[float]]) -> dict[Pair, str]:
        self.round += 1
        for a, b in self.open_pairs:
            x, y = np.asarray(values[a], float), np.asarray(values[b], float)
            pooled, m = np.concatenate([x, y]), len(x)
            observed = abs(x.mean() - y.mean())
            perms = self.rng.random((self.paths, len(pooled))).argsort(axis=1)
            first = pooled[perms[:, :m]].mean(axis=1) - pooled[perms[:, m:]].mean(axis=1)
            p_value = (1 + np.sum(np.abs(first) >= observed - 1e-12)) / (1 + self.paths)
            if p_value <= self.alpha:
                self.decisions[(a, b)] = LARGER if x.mean() > y.mean() else SMALLER
        if self.round == self.K:
            self.decisions = {p: EQUAL if d == CONTINUE else d for p, d in self.decisions.items()}
        return dict(self.decisions)


@dataclass(frozen=True)
class Outcome:
    designs: int
    error: float  # share of designs that called some truly equal pair different (or a different pair backwards)
    error_se: float  # its binomial Monte Carlo error
    power: float  # share of truly different pairs called different in the right direction (nan: none differ)
    seeds: float  # mean seeds trained per design
    rounds: float  # mean rounds per design

    def level_held(self, alpha: float, z: float = 3.0) -> bool:
        """The error within z Monte Carlo standard errors of the level, or below it (the se at the level itself,
        so a design with no error at all is not judged by a zero se)."""
        return self.error <= alpha + z * math.sqrt(alpha * (1 - alpha) / self.designs)


def simulate(make_test: Callable[[list[str], int], SequentialTest], scores: Sequence[Scores],
             means: Sequence[float], n: int, designs: int, seed: int = 0) -> Outcome:
    """`designs` simulated designs of len(scores) settings; `means[i]` is setting i's true mean (which pairs truly
    differ, and in which direction). `make_test(settings, design_number)` builds a fresh test per design."""
    rng = np.random.default_rng(seed)
    names = [f"s{i}" for i in range(len(scores))]
    truth = {(a, b): np.sign(means[i] - means[j]) for (i, a), (j, b) in itertools.combinations(enumerate(names), 2)}
    wrong = found = should = seeds = rounds = 0
    for d in range(designs):
        test = make_test(names, d)
        values: dict[str, list[float]] = {s: [] for s in names}
        while not test.finished:
            for s in test.in_play:
                values[s].extend(scores[names.index(s)](rng, n))
                seeds += n
            test.look(values)
            rounds += 1
        called = {p: {LARGER: 1, SMALLER: -1}.get(v, 0) for p, v in test.decisions.items()}
        wrong += any(c != 0 and c != truth[p] for p, c in called.items())
        found += sum(c != 0 and c == truth[p] for p, c in called.items())
        should += sum(t != 0 for t in truth.values())
    error = wrong / designs
    return Outcome(designs=designs, error=error, error_se=math.sqrt(max(error * (1 - error), 1e-12) / designs),
                   power=found / should if should else math.nan, seeds=seeds / designs, rounds=rounds / designs)


def adastop(n: int, K: int, alpha: float, paths: int = 10_000) -> Callable[[list[str], int], Comparator]:
    """The factory simulate() needs for our AdaStop, its permutations seeded per design."""
    return lambda settings, d: Comparator(settings, n=n, K=K, alpha=alpha, paths=paths, seed=d)
