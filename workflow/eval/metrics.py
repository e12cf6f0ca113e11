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
