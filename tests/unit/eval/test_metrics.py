"""pass@k / avg@k and answer extraction."""

from __future__ import annotations

import itertools
import time
from math import comb

import numpy as np
import pytest

from workflow.benchmarks.answers import extract_boxed
from workflow.benchmarks.metrics import ks_for, pass_at_k, scores
from workflow.benchmarks.arithmetic import reward


def brute_force_pass_at_k(correct: list[bool], k: int) -> float:
    subsets = list(itertools.combinations(range(len(correct)), k))
    return sum(any(correct[i] for i in s) for s in subsets) / len(subsets)


def test_unbiased_pass_at_k_equals_enumeration_over_all_k_subsets():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 11))
        correct = list(rng.random(n) < rng.random())
        for k in range(1, n + 1):
            assert pass_at_k(n, sum(correct), k) == pytest.approx(brute_force_pass_at_k(correct, k), abs=1e-12)


def test_scores_per_k_and_avg():
    correct = np.array([[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=bool)
    s = scores(correct)
    assert sorted(s) == [1, 2, 4]
    assert s[1]["avg_at_k"] == pytest.approx(5 / 12) and s[1]["pass_at_k"] == pytest.approx(5 / 12)
    assert s[2]["pass_at_k"] == pytest.approx((1 - comb(3, 2) / comb(4, 2) + 1 + 0) / 3)
    assert s[4]["pass_at_k"] == pytest.approx(2 / 3)
    assert ks_for(6) == [1, 2, 4, 6] and ks_for(1) == [1]
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


@pytest.mark.parametrize("text, expected", [
    ("\\boxed{85}", "85"),
    ("3+4=7,7*5=35\\boxed{35}", "35"),
    ("\\boxed{1}\\boxed{2}", "2"),  # the last one counts
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces
    ("\\boxed{7}\\boxed{8", "7"),  # an unclosed last box falls back to the previous complete one
    ("no box 85", None),
    ("\\boxed{", None),
])
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_reward_is_exact_match_of_last_box():
    assert reward("\\boxed{85}", "85") == 1.0
    assert reward("\\boxed{085}", "85") == 0.0
    assert reward("85", "85") == 0.0


def test_extraction_is_linear_on_adversarial_input():
    for text in ("\\boxed{" * 200_000, "\\boxed{" + "{" * 10_000 + "1", "x" * 1_000_000 + "\\boxed{"):
        t0 = time.perf_counter()
        assert extract_boxed(text) is None
        assert time.perf_counter() - t0 < 2.0


def test_maj_at_k_votes_by_extracted_answer():
    from workflow.benchmarks.metrics import maj_at_k
    answers = [["5", "5", "7", None], ["3", "4", "4", "4"], [None, None, None, None], ["1", "2", "1", "2"]]
    correct = np.array([[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0], [0, 1, 0, 1]], dtype=bool)
    # problem 0: "5" wins -> right; 1: "4" wins -> wrong; 2: no votes -> wrong; 3: tie 1 vs 2, first seen "1" -> wrong
    assert maj_at_k(answers, correct, 4) == pytest.approx(1 / 4)
    assert maj_at_k(answers, correct, 1) == pytest.approx(2 / 4)  # k = 1: each problem's first sample decides


def test_bootstrap_interval_covers_the_mean_and_shrinks_with_more_problems():
    from workflow.benchmarks.metrics import bootstrap_ci
    rng = np.random.default_rng(1)
    small = (rng.random(50) < 0.4).astype(float)
    big = (rng.random(5000) < 0.4).astype(float)
    lo_s, hi_s = bootstrap_ci(small)
    lo_b, hi_b = bootstrap_ci(big)
    assert lo_s <= small.mean() <= hi_s and lo_b <= big.mean() <= hi_b
    assert (hi_b - lo_b) < (hi_s - lo_s) / 5
    assert bootstrap_ci(small, seed=3) == bootstrap_ci(small, seed=3)


def test_set_average_needs_every_member():
    from workflow.benchmarks.metrics import set_average
    assert set_average({"a": 0.2, "b": 0.4}, ("a", "b")) == pytest.approx(0.3)
    assert set_average({"a": 0.2}, ("a", "b")) is None
