"""AdaStop: the group-sequential permutation test that decides, round by round, which settings differ.

Mathieu et al., "AdaStop: adaptive statistical testing for sound comparisons of Deep RL agents" (TMLR 2024). L
settings; at each of at most K looks every setting still in a pair that is undecided gets n more runs (seeds),
then each such pair is decided `larger`, `smaller`, or continues; pairs still open at the last look are `equal`.
The family-wise error (any pair called different that is not, over all pairs and all looks) is at most alpha.

Why our own implementation and not the package. PyPI's `adastop` 0.1.3 (by the paper's authors) was checked
first (bench/seeds_on_demand.py, the "package" row): under the null its family-wise error is about twice the level
(0.097 ± 0.007 for one pair, one look, alpha 0.05; 0.13 with three looks). Its step-down takes the boundary from the
permutations' *signed* largest difference while the statistic it compares against is the *absolute* one, so a
two-sided test gets a one-sided boundary. Here both are absolute, as in the paper. (The package also pulls pandas
and matplotlib, which `validate` / `status` / `plan` must not load.)

The test, per look k (0-based) and pair (a, b) still open:
- the statistic is T = |sum over blocks j <= k of (mean of a's block-j runs - mean of b's block-j runs)|, i.e.
  (k+1) times the difference of the means with equal n;
- its null distribution is sampled by `paths` permutation paths: each path permutes each block's 2n runs between
  the two sides (the first block: every one of the C(2n, n) splits, equally often, so the first look is exact;
  later blocks: one random split per path and block), the identity on path 0;
- step-down: the boundary b is the smallest value such that (paths already spent + paths alive whose largest
  |permuted statistic| over the open pairs exceeds b) / paths <= alpha (k+1) / K (linear spending); the open pair
  with the largest T is rejected when T > b, then the boundary is recomputed over the pairs left, until none is
  rejected;
- paths whose largest |permuted statistic| exceeds the final boundary are spent (they stand for rejections under
  the null) and take no part in later looks: the later looks' distributions are conditional on no rejection.

Reproducible: every block's permutations come from a generator seeded by (seed, block, pair), so the same values
give the same decisions, and `replay` of the recorded rounds rebuilds the state a driver had before it was killed.

Only numpy: imported lazily by the design's driver and the report, never by reading a sweep.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from workflow.sweep.design_spec import first_look_splits  # (the floor's arithmetic: validate checks it)

# the verdicts a pair can have; CONTINUE only between looks
LARGER, SMALLER, EQUAL, CONTINUE = "larger", "smaller", "equal", "continue"


Pair = tuple[str, str]


@dataclass
class Look:
    """What one look saw and decided."""

    round: int  # 1-based
    open_before: list[Pair]  # the pairs tested at this look
    decided: dict[Pair, str]  # pairs decided at this look: larger / smaller (equal at the last look)
    boundary: float  # the final boundary of the step-down (inf when no path could be spent)
    statistics: dict[Pair, float]  # each tested pair's T
    spent: float  # the level spent so far (paths spent / paths)


@dataclass
class Comparator:
    """The test's state between looks. `look(values)` after each round: `values[setting]` is every run of the
    setting so far, in round order (n per round; a setting no open pair needs may stop growing)."""

    settings: list[str]
    n: int
    K: int
    alpha: float
    pairs: list[Pair] | None = None  # None: every pair of settings
    paths: int = 10_000
    seed: int = 0
    decisions: dict[Pair, str] = field(init=False)
    looks: list[Look] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        if self.n < 1 or self.K < 1:
            raise ValueError(f"n and K must be >= 1 (got n={self.n}, K={self.K})")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if len(set(self.settings)) != len(self.settings) or len(self.settings) < 2:
            raise ValueError(f"at least two distinct settings are compared (got {self.settings})")
        self.pairs = [tuple(p) for p in (self.pairs if self.pairs is not None
                                         else itertools.combinations(self.settings, 2))]
        unknown = {s for p in self.pairs for s in p} - set(self.settings)
        if unknown or not self.pairs or any(a == b for a, b in self.pairs):
            raise ValueError(f"pairs must be distinct settings of {self.settings} (got {self.pairs})")
        self.decisions = {p: CONTINUE for p in self.pairs}
        splits = first_look_splits(self.n)
        # the first block exact: every split equally often (as many whole copies of all splits as fit in `paths`)
        self._first_exact = splits <= self.paths
        self._m = (self.paths // splits) * splits if self._first_exact else self.paths
        self._sums = {p: np.zeros(self._m) for p in self.pairs}  # each path's permuted statistic, signed, per pair
        self._alive = np.ones(self._m, dtype=bool)

    # -------------------------------------------------------------------------------------------- the state
    @property
    def round(self) -> int:
        """Looks done so far."""
        return len(self.looks)

    @property
    def open_pairs(self) -> list[Pair]:
        return [p for p in self.pairs if self.decisions[p] == CONTINUE]

    @property
    def in_play(self) -> list[str]:
        """The settings the next round trains: those in an open pair."""
        wanted = {s for p in self.open_pairs for s in p}
        return [s for s in self.settings if s in wanted]

    @property
    def finished(self) -> bool:
        return not self.open_pairs

    @property
    def spent(self) -> float:
        return float((~self._alive).sum() / self._m)

    # -------------------------------------------------------------------------------------------- a look
    def look(self, values: Mapping[str, Sequence[float]]) -> dict[Pair, str]:
        """Test after round `self.round + 1`; returns the decisions of every pair (CONTINUE for the open ones)."""
        if self.finished or self.round >= self.K:
            raise ValueError(f"the design is over (round {self.round} of {self.K}, {len(self.open_pairs)} pair(s) "
                             "open): no look is left")
        k = self.round
        want = (k + 1) * self.n
        for s in self.in_play:
            got = len(values.get(s, ()))
            if got != want:
                raise ValueError(f"look {k + 1}: setting {s!r} has {got} value(s); after {k + 1} round(s) of "
                                 f"{self.n} it must have {want}")
        arrays = {s: np.asarray(values[s], dtype=float) for s in self.in_play}
        for s, a in arrays.items():
            if not np.all(np.isfinite(a)):
                raise ValueError(f"look {k + 1}: setting {s!r} has a value that is not a finite number")
        tested = self.open_pairs
        observed = {}
        for p in tested:
            a, b = arrays[p[0]], arrays[p[1]]
            self._add_block(p, k, a[k * self.n:want], b[k * self.n:want])
            observed[p] = float(sum(a[j * self.n:(j + 1) * self.n].mean() - b[j * self.n:(j + 1) * self.n].mean()
                                    for j in range(k + 1)))
        level = self.alpha * (k + 1) / self.K
        spent = int((~self._alive).sum())
        decided: dict[Pair, str] = {}
        still = list(tested)
        boundary = math.inf
        while still:
            largest = np.max(np.abs(np.stack([self._sums[p] for p in still])), axis=0)[self._alive]
            boundary = self._boundary(largest, spent, level)
            top = max(still, key=lambda p: abs(observed[p]))
            if not abs(observed[top]) > boundary:
                break
            decided[top] = LARGER if observed[top] > 0 else SMALLER
            still.remove(top)
        if still and math.isfinite(boundary):  # the paths beyond the final boundary stand for rejections: spent
            largest = np.max(np.abs(np.stack([self._sums[p] for p in still])), axis=0)
            self._alive &= ~(largest > boundary)
        if k + 1 == self.K:
            decided.update({p: EQUAL for p in still})
        self.decisions.update(decided)
        self.looks.append(Look(round=k + 1, open_before=tested, decided=decided, boundary=boundary,
                               statistics={p: abs(v) for p, v in observed.items()}, spent=self.spent))
        return dict(self.decisions)

    def _boundary(self, largest: np.ndarray, spent: int, level: float) -> float:
        """The smallest value b among the alive paths' statistics with (spent + #{alive > b}) / paths <= level;
        inf when even the largest cannot be put beyond (the level cannot pay for a single path yet)."""
        values = np.sort(largest)
        beyond = len(values) - np.searchsorted(values, values, side="right")  # strictly greater, ties counted once
        ok = (spent + beyond) / self._m <= level
        return float(values[np.argmax(ok)]) if ok.any() else math.inf

    def _add_block(self, pair: Pair, block: int, a: np.ndarray, b: np.ndarray) -> None:
        """Each path's permuted block difference, added to the pair's sums."""
        n = self.n
        pooled = np.concatenate([a, b])
        if block == 0 and self._first_exact:
            combos = np.array(list(itertools.combinations(range(2 * n), n)))  # the identity first
            side = np.zeros((len(combos), 2 * n), dtype=bool)
            np.put_along_axis(side, combos, True, axis=1)
            side = np.tile(side, (self._m // len(combos), 1))
        else:
            rng = np.random.default_rng([self.seed, block, self.pairs.index(pair)])
            order = rng.random((self._m, 2 * n)).argsort(axis=1)
            side = np.zeros((self._m, 2 * n), dtype=bool)
            np.put_along_axis(side, order[:, :n], True, axis=1)
            side[0] = np.arange(2 * n) < n  # path 0: the observed split
        total = pooled.sum()
        first = side @ pooled  # the sum of the runs permuted onto a's side
        self._sums[pair] += first / n - (total - first) / n


def replay(rounds: Sequence[Mapping[str, Sequence[float]]], **design) -> Comparator:
    """The comparator after the recorded rounds: `rounds[r][setting]` is the setting's n values of round r + 1 (only
    for the settings that round trained). The same decisions an uninterrupted run reached (the permutations are
    seeded per block and pair)."""
    c = Comparator(**design)
    sofar: dict[str, list[float]] = {s: [] for s in c.settings}
    for values in rounds:
        for s, v in values.items():
            sofar[s].extend(float(x) for x in v)
        c.look(sofar)
    return c
