"""workflow/report/power.py against simulation: runs simulated at the level of 0/1 verdicts (P problems, k samples
each, every seed shifting every problem's accuracy by its own training noise), seeded so the results are fixed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from workflow.report.power import Variance, detectable, estimate, eval_variance, power, seeds_needed

P, K, SIGMA_TRAIN = 100, 8, 0.03


def problems(rng, n: int) -> np.ndarray:
    """True per-problem accuracies in [0.15, 0.75]: a seed's shift (sd 0.03) plus a difference of a few points
    never reaches 0 or 1, so clipping never binds and the model's variances hold exactly."""
    return 0.15 + 0.6 * rng.beta(2, 3, size=n)


def runs(rng, p: np.ndarray, shape: tuple[int, ...], k: int, sigma: float, offset: float = 0.0):
    """Runs of shape `shape`: each adds one N(0, sigma) shift (and `offset`) to every problem, then draws k verdicts
    per problem. Returns each run's correct counts per problem (shape + (P,)) and accuracy."""
    shift = rng.normal(offset, sigma, size=shape)[..., None] if sigma else np.full(shape + (1,), offset)
    counts = rng.binomial(k, np.clip(p + shift, 0, 1))
    return counts, counts.mean(axis=-1) / k


def run_variance_of(p: np.ndarray, k: int, sigma: float) -> float:
    """The model's run variance: sigma^2 + (1/P^2) sum E[q(1-q)]/k with q = p + N(0, sigma): E[q(1-q)] =
    p(1-p) - sigma^2."""
    return sigma ** 2 + float(np.sum(p * (1 - p) - sigma ** 2)) / (k * p.size ** 2)


def test_eval_variance_is_unbiased_and_is_the_run_accuracy_variance():
    rng = np.random.default_rng(1)
    p, k = rng.beta(2, 3, size=40), 4  # the whole (0, 1) range here: no shift, nothing clipped
    truth = float(np.sum(p * (1 - p))) / (k * p.size ** 2)
    counts, acc = runs(rng, p, (20_000,), k, sigma=0.0)
    estimates = np.array([eval_variance(c, k) for c in counts])
    assert estimates.mean() == pytest.approx(truth, rel=0.02)  # its standard error here: ~0.1%
    assert acc.var(ddof=1) == pytest.approx(truth, rel=0.04)  # ~1% (sqrt(2 / 20000))
    assert eval_variance(list(counts[0]), k) == estimates[0]  # a plain list of ints works the same


def test_estimate_recovers_the_training_variance():
    rng = np.random.default_rng(2)
    settings = {f"s{i}": problems(rng, P) for i in range(3)}  # different settings, different problem accuracies
    accs, evs = {}, {}
    for name, p in settings.items():
        counts, acc = runs(rng, p, (200,), K, SIGMA_TRAIN)
        accs[name], evs[name] = list(acc), [eval_variance(c, K) for c in counts]
    v = estimate(accs, evs, K)
    assert v.k == K and v.seeds == 600
    assert v.train == pytest.approx(SIGMA_TRAIN ** 2, rel=0.25)  # standard error ~8% with 597 df
    eval_truth = np.mean([run_variance_of(p, K, SIGMA_TRAIN) - SIGMA_TRAIN ** 2 for p in settings.values()])
    assert v.eval == pytest.approx(eval_truth, rel=0.03)
    assert v.run_variance(2 * K) == pytest.approx(v.train + v.eval / 2)
    # A setting with one seed says nothing about the spread between seeds: it changes nothing.
    one = estimate({**accs, "lone": [0.9]}, {**evs, "lone": [0.001]}, K)
    assert (one.train, one.eval, one.seeds) == (v.train, v.eval, v.seeds)


def rejection_rate(rng, p: np.ndarray, seeds: int, difference: float, experiments: int = 4000) -> float:
    """Experiments of two settings x `seeds` runs whose true mean accuracy differs by `difference` (half of it on
    each side of p, so the run variance averaged over both settings is that of p to first order): the share where
    Student's two-sided t-test rejects at 5%."""
    _, a = runs(rng, p, (experiments, seeds), K, SIGMA_TRAIN, offset=-difference / 2)
    _, b = runs(rng, p, (experiments, seeds), K, SIGMA_TRAIN, offset=difference / 2)
    return float(np.mean(stats.ttest_ind(a, b, axis=1).pvalue < 0.05))


@pytest.mark.slow  # simulations
def test_seeds_needed_and_detectable_against_simulated_claims():
    rng = np.random.default_rng(3)
    p = problems(rng, P)
    v = run_variance_of(p, K, SIGMA_TRAIN)  # about 0.0011: training noise 0.0009 + eval noise
    delta = 0.05
    n = seeds_needed(delta, v)
    assert 4 <= n <= 20  # a claim of this size at this noise: a handful of seeds, not 2 nor hundreds
    assert power(delta, v, n) >= 0.8 > power(delta, v, n - 1)
    d = detectable(v, n)
    assert d <= delta and power(d, v, n) == pytest.approx(0.8, abs=1e-6)
    se = math.sqrt(0.8 * 0.2 / 4000)  # ~0.0063
    at_d = rejection_rate(rng, p, n, d)
    at_n = rejection_rate(rng, p, n, delta)
    below = rejection_rate(rng, p, n - 1, delta)
    assert abs(at_d - 0.8) <= 0.03, at_d
    assert at_n >= 0.8 - 0.03, at_n
    assert below < 0.8 + 2 * se, below
    assert abs(below - power(delta, v, n - 1)) <= 0.03, below


def test_edge_cases():
    assert math.isnan(detectable(0.001, 1))
    assert detectable(0.0, 5) == 0.0
    assert seeds_needed(0.01, 0.0) == 2
    assert power(0.0, 0.001, 5) == pytest.approx(0.05)  # no difference: the test's size
    assert power(0.02, 0.001, 5) < power(0.02, 0.001, 10) < power(0.02, 0.001, 20)
    assert power(0.01, 0.001, 10) < power(0.02, 0.001, 10) < power(0.04, 0.001, 10)
    assert seeds_needed(0.01, 0.001, max_seeds=100) is None  # 158 would do
    assert seeds_needed(0.01, 0.001, max_seeds=158) == 158
    assert seeds_needed(0.001, 0.001) is None  # 15,699 would do: past the default 10,000
    # Far out, scipy's noncentral t gives nan for the wrong-sign tail (scipy 1.17): power is still 1 there and
    # seeds_needed's bisection (which lands on such n) still finds the first n that reaches the power.
    assert [power(0.05, 0.001, n) for n in (100, 1000, 5000)] == pytest.approx([1.0, 1.0, 1.0])
    assert seeds_needed(0.05, 0.001) == 8
    assert Variance(0.001, 0.002, k=4, seeds=10).run_variance(8) == pytest.approx(0.002)


@pytest.mark.parametrize("call, argument", [
    (lambda: seeds_needed(0.0, 0.001), "delta"),
    (lambda: seeds_needed(-0.01, 0.001), "delta"),
    (lambda: seeds_needed(0.01, -0.001), "run_variance"),
    (lambda: seeds_needed(0.01, 0.001, power_=1.0), "power_"),
    (lambda: seeds_needed(0.01, 0.001, max_seeds=1), "max_seeds"),
    (lambda: power(0.01, 0.001, 1), "seeds"),
    (lambda: power(0.01, 0.001, 5, alpha=0.0), "alpha"),
    (lambda: power(0.01, math.nan, 5), "run_variance"),
    (lambda: detectable(-1.0, 5), "run_variance"),
    (lambda: detectable(0.001, 5, power_=0.01), "power_"),
    (lambda: eval_variance([1, 2], 1), "k"),
    (lambda: eval_variance([1, 5], 4), "per_problem_correct"),
    (lambda: eval_variance([], 4), "per_problem_correct"),
    (lambda: estimate({"a": [0.5, 0.6]}, {"a": [0.001, 0.001]}, 1), "k"),
    (lambda: estimate({"a": [0.5, 0.6]}, {"a": [0.001]}, 4), "eval_variances"),
    (lambda: estimate({"a": [0.5, 0.6]}, {"a": [0.001, -0.001]}, 4), "eval variances"),
    (lambda: estimate({"a": [0.5]}, {"a": [0.001]}, 4), "run_accuracies"),
    (lambda: Variance(-0.001, 0.001, 4, 10), "train"),
    (lambda: Variance(0.001, 0.001, 4, 10).run_variance(0), "k"),
])
def test_invalid_inputs_say_which_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()
