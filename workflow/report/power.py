"""How many seeds a claim needs: the power of comparing two settings' mean accuracy over seeds.

Model. A run (one seed of one setting) is evaluated on a benchmark of P fixed problems, k samples each; its
accuracy is the mean of its P*k 0/1 verdicts. Its variance around its setting's mean has two independent parts:

    Var(run accuracy) = train + eval(k),    eval(k) = (1/P^2) * sum_i p_i (1 - p_i) / k

`train` is the spread between seeds (training randomness, the same for any k); eval(k) is the sampling noise of
finite k for a run whose per-problem true accuracies are p_i, so with k' samples it is eval(k) * k / k'. From one
run's observed per-problem accuracies phat_i (each the mean of k samples) the unbiased estimate of eval(k) is
(1/P^2) * sum_i phat_i (1 - phat_i) / (k - 1)  (E[phat (1 - phat)] = p (1 - p) (k - 1) / k). The variance of run
accuracies over seeds estimates train + eval(k), hence train = max(0, var over seeds - mean eval estimate).

Comparison: two settings, n seeds each, Student's two-sample t-test, two-sided at level alpha. With normal run
accuracies of a common variance v and a true difference delta of mean accuracy, the t statistic is noncentral t
with df = 2n - 2 and noncentrality delta / sqrt(2 v / n), so the power below is exact, not an approximation.

Assumed: seeds independent; run accuracies ~normal (a mean of many verdicts, so close to it); equal seeds per
setting and equal run variance in both settings; the benchmark's problems fixed and shared by both settings, so
problem difficulty is not a source of between-setting variance (a claim about other problems would need it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def _check(name: str, value: float, low: float, *, strict: bool = False, high: float | None = None,
           integer: bool = False) -> None:
    if integer and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    bad = not math.isfinite(value) or (value <= low if strict else value < low) or (high is not None and value >= high)
    if bad:
        bound = f"> {low}" if strict else f">= {low}"
        raise ValueError(f"{name} must be finite and {bound}{f' and < {high}' if high is not None else ''}, "
                         f"got {value!r}")


@dataclass(frozen=True)
class Variance:
    """What one benchmark's measured spread says about one run's accuracy."""
    train: float  # sigma^2 between seeds (training randomness), >= 0
    eval: float  # sigma^2 of the evaluation's sampling noise at k samples per problem
    k: int  # samples per problem the eval variance was measured at
    seeds: int  # how many runs (seeds) it was estimated from (all settings with >= 2 seeds)

    def __post_init__(self):
        _check("train", self.train, 0.0)
        _check("eval", self.eval, 0.0)
        _check("k", self.k, 1, integer=True)
        _check("seeds", self.seeds, 0, integer=True)

    def run_variance(self, k: int | None = None) -> float:
        """One run's accuracy variance when evaluated with k samples per problem (default: the measured k)."""
        k = self.k if k is None else k
        _check("k", k, 1, integer=True)
        return self.train + self.eval * self.k / k


def eval_variance(per_problem_correct: list[int] | np.ndarray, k: int) -> float:
    """One run's sigma2_eval estimate from each problem's count of correct samples out of k (k >= 2)."""
    _check("k", k, 2, integer=True)
    c = np.asarray(per_problem_correct, dtype=float)
    if c.ndim != 1 or c.size == 0 or np.any((c < 0) | (c > k) | (c != np.round(c))):
        raise ValueError(f"per_problem_correct must be a non-empty list of integer counts in [0, k={k}]")
    p = c / k
    return float(np.sum(p * (1 - p)) / (k - 1) / c.size ** 2)


def estimate(run_accuracies: dict[str, list[float]], eval_variances: dict[str, list[float]], k: int) -> Variance:
    """Pooled over settings: run_accuracies[setting] = each seed's accuracy; eval_variances[setting] = each seed's
    sigma2_eval estimate (eval_variance). The between-seed variance is pooled over settings with >= 2 seeds (sum of
    squared deviations from each setting's own mean / sum of (n - 1)); train = max(0, pooled - mean eval), the eval
    mean weighted like the pooled variance ((n - 1) per setting; the plain mean when seeds are equal), so that it is
    exactly the eval part of the pooled variance's expectation. Settings with one seed say nothing about spread."""
    _check("k", k, 2, integer=True)
    if run_accuracies.keys() != eval_variances.keys():
        raise ValueError("run_accuracies and eval_variances must name the same settings")
    ss = df = ev = 0.0
    runs = 0
    for name, acc in run_accuracies.items():
        acc, var = np.asarray(acc, dtype=float), np.asarray(eval_variances[name], dtype=float)
        if acc.shape != var.shape or acc.ndim != 1:
            raise ValueError(f"eval_variances[{name!r}] must have one value per run of run_accuracies[{name!r}]")
        if not (np.all(np.isfinite(acc)) and np.all(np.isfinite(var)) and np.all(var >= 0)):
            raise ValueError(f"setting {name!r}: accuracies must be finite and eval variances finite and >= 0")
        if acc.size >= 2:
            ss += float(np.sum((acc - acc.mean()) ** 2))
            df += acc.size - 1
            ev += (acc.size - 1) * float(var.mean())
            runs += acc.size
    if df == 0:
        raise ValueError("run_accuracies needs a setting with >= 2 seeds to measure the spread between seeds")
    # The truncation at 0 biases train up slightly when it is near 0; a negative variance is no use downstream.
    return Variance(train=max(0.0, ss / df - ev / df), eval=ev / df, k=k, seeds=runs)


def power(delta: float, run_variance: float, seeds: int, alpha: float = 0.05) -> float:
    """Power of the two-sided two-sample Student t-test with `seeds` runs per setting to detect a true difference
    `delta` of mean accuracy (exact for normal run accuracies: noncentral t with df = 2*seeds - 2, noncentrality
    delta / sqrt(2 * run_variance / seeds)). delta = 0 gives alpha, the test's size."""
    _check("delta", delta, 0.0)
    _check("run_variance", run_variance, 0.0)
    _check("seeds", seeds, 2, integer=True)
    _check("alpha", alpha, 0.0, strict=True, high=1.0)
    if run_variance == 0:
        return 1.0 if delta > 0 else alpha
    from scipy import stats  # here, not at the top: ~1.5 s of every report's import, most reports never ask (one seed)
    df, nc = 2 * seeds - 2, delta / math.sqrt(2 * run_variance / seeds)
    crit = stats.t.ppf(1 - alpha / 2, df)
    # Both tails: a significant result of the wrong sign is rare but is a rejection all the same. scipy's nct.cdf
    # returns nan there once it is tiny (df = 198, nc = 10: scipy 1.17); it is P(Z + nc < -crit * S) <= P(Z < -nc)
    # with S > 0, so that bound stands in (wherever we saw nan, the bound was < 1e-9: power is unaffected).
    wrong = stats.nct.cdf(-crit, df, nc)
    wrong = min(float(wrong), stats.norm.sf(nc)) if math.isfinite(wrong) else 0.0
    return float(stats.nct.sf(crit, df, nc)) + wrong


def detectable(run_variance: float, seeds: int, power_: float = 0.8, alpha: float = 0.05) -> float:
    """The smallest difference detected with that power; nan when seeds < 2; 0 when run_variance == 0."""
    _check("run_variance", run_variance, 0.0)
    _check("alpha", alpha, 0.0, strict=True, high=1.0)
    _check("power_", power_, alpha, strict=True, high=1.0)
    if seeds < 2:
        return math.nan
    if run_variance == 0:
        return 0.0
    from scipy import optimize
    hi = math.sqrt(2 * run_variance / seeds)  # one standard error of the difference; power rises with delta
    while power(hi, run_variance, seeds, alpha) < power_:
        hi *= 2
    return float(optimize.brentq(lambda d: power(d, run_variance, seeds, alpha) - power_, 0.0, hi, xtol=1e-12,
                                 rtol=1e-10))


def seeds_needed(delta: float, run_variance: float, power_: float = 0.8, alpha: float = 0.05,
                 max_seeds: int = 10_000) -> int | None:
    """The fewest seeds per setting (>= 2) whose power to detect `delta` is >= power_; None beyond max_seeds."""
    _check("delta", delta, 0.0, strict=True)
    _check("run_variance", run_variance, 0.0)
    _check("alpha", alpha, 0.0, strict=True, high=1.0)
    _check("power_", power_, alpha, strict=True, high=1.0)
    _check("max_seeds", max_seeds, 2, integer=True)
    ok = lambda n: power(delta, run_variance, n, alpha) >= power_  # noqa: E731
    if not ok(max_seeds):
        return None
    lo, hi = 1, max_seeds  # power rises with seeds: bisect for the first n that reaches it (lo fails, hi passes)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi
