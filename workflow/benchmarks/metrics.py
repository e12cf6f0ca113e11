"""avg@k and the unbiased pass@k estimator (Chen et al. 2021), computed per problem then averaged."""

from __future__ import annotations

from math import comb

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k samples drawn without replacement from n, c of them correct, is correct)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def ks_for(n: int) -> list[int]:
    """The k values reported for n samples: 1, 2, 4, ... up to n, and n itself."""
    ks = [1 << i for i in range(n.bit_length()) if (1 << i) <= n]
    return ks if ks[-1] == n else ks + [n]


def scores(correct: np.ndarray) -> dict[int, dict[str, float]]:
    """correct: [problems, n] booleans. -> {k: {avg_at_k, pass_at_k}}; avg@k is the mean over all n samples
    (an unbiased estimate of avg@k for every k <= n), pass@k the mean over problems of the unbiased estimator."""
    correct = np.asarray(correct, dtype=bool)
    n_problems, n = correct.shape
    c = correct.sum(axis=1)
    avg = float(correct.mean()) if correct.size else float("nan")
    out = {}
    for k in ks_for(n):
        out[k] = {"avg_at_k": avg, "pass_at_k": float(np.mean([pass_at_k(n, int(ci), k) for ci in c]))}
    return out


def maj_at_k(answers: list[list[str | None]], correct: np.ndarray, k: int) -> float:
    """Majority vote over each problem's first k samples: the most frequent extracted answer (ties: the one seen
    first; unextractable answers do not vote) is right if the samples that gave it were scored right.
    Answers are grouped by their extracted string, so equivalent spellings (1/2, 0.5) vote separately."""
    correct = np.asarray(correct, dtype=bool)
    hits = []
    for row, ok in zip(answers, correct):
        votes: dict[str, int] = {}
        right: dict[str, bool] = {}
        for a, c in zip(row[:k], ok[:k]):
            if a is None:
                continue
            votes[a] = votes.get(a, 0) + 1
            right[a] = right.get(a, False) or bool(c)
        hits.append(right[max(votes, key=votes.get)] if votes else False)  # max keeps the first of equal counts
    return float(np.mean(hits)) if hits else float("nan")


def bootstrap_ci(per_problem: np.ndarray, n_boot: int = 1000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean over problems (problems resampled with replacement)."""
    x = np.asarray(per_problem, dtype=float)
    if x.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def benchmark_scores(correct: np.ndarray, answers: list[list[str | None]], n_boot: int = 1000,
                     seed: int = 0) -> dict[int, dict[str, float]]:
    """Everything eval_scores holds per k: avg@k and pass@k (with bootstrap 95% intervals over problems), maj@k."""
    correct = np.asarray(correct, dtype=bool)
    out = scores(correct)
    n = correct.shape[1]
    avg_lo, avg_hi = bootstrap_ci(correct.mean(axis=1), n_boot, seed)
    for k, row in out.items():
        per_problem_pass = np.array([pass_at_k(n, int(c), k) for c in correct.sum(axis=1)])
        pass_lo, pass_hi = bootstrap_ci(per_problem_pass, n_boot, seed)
        row.update(maj_at_k=maj_at_k(answers, correct, k), avg_ci_low=avg_lo, avg_ci_high=avg_hi,
                   pass_ci_low=pass_lo, pass_ci_high=pass_hi)
    return out


def set_average(per_benchmark: dict[str, float], members: tuple[str, ...]) -> float | None:
    """The seeds' "Avg" column: the unweighted mean over the benchmarks of a set; None unless all are present."""
    if not all(m in per_benchmark for m in members):
        return None
    return float(np.mean([per_benchmark[m] for m in members]))
