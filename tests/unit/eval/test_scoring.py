"""Scoring: math-verify equivalence with a hard time bound, multiple-choice shuffling and letter extraction."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from workflow.benchmarks.scoring import LETTERS, MathVerifier, extract_letter, format_mc, option_permutation, score_mc


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(timeout_s=10.0) as v:
        yield v


@pytest.mark.parametrize("response", ["so \\boxed{\\frac{1}{2}}", "\\boxed{\\dfrac12}", "\\boxed{0.5}",
                                      "\\boxed{1/2}", "first \\boxed{3} then \\boxed{\\frac{2}{4}}"])
def test_equivalent_forms_score_right(verifier, response):
    v = verifier.score(response, "\\frac{1}{2}")
    assert v.correct and not v.timed_out


@pytest.mark.parametrize("response", ["\\boxed{\\frac{1}{3}}", "\\boxed{2}", "the answer is 1/2", "\\boxed{}",
                                      "\\boxed{x+}"])
def test_wrong_or_missing_answers_score_wrong(verifier, response):
    assert not verifier.score(response, "\\frac{1}{2}").correct


@pytest.mark.slow  # waits out time limits
def test_adversarial_outputs_finish_in_bounded_time_and_score_wrong():
    with MathVerifier(timeout_s=3.0) as v:
        for response in ("x" * 1_000_000 + "\\boxed{" + "1" * 1_000_000,   # 1 MB+, unclosed box
                         "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}",   # 10,000 nested braces
                         "\\boxed{" + "(" * 5_000 + "1" + ")" * 5_000 + "}"):
            t0 = time.monotonic()
            verdict = v.score(response, "\\frac{1}{2}")
            assert not verdict.correct
            assert time.monotonic() - t0 < 3.0 + 15.0  # the time bound (+ a worker restart after a timeout)


@pytest.mark.slow  # waits out a time limit
def test_a_hung_comparison_is_abandoned_recorded_and_the_worker_restarts():
    with MathVerifier(timeout_s=30.0) as v:
        v.equivalent("1", "1")  # warm the worker up (imports)
        # a power tower takes sympy far longer than 5 ms to parse and compare (seconds here)
        v.timeout_s = 0.005
        ok, timed_out = v.equivalent("2", "2^{2^{2^{2^{2^{2^{2}}}}}}")
        assert (ok, timed_out) == (False, True)
        v.timeout_s = 30.0
        assert v.equivalent("\\frac{1}{2}", "0.5") == (True, False)  # a fresh worker carries on


def test_threads_sharing_one_verifier_each_get_their_own_answer(verifier):
    """verl's reward manager scores a batch from a thread pool through one verifier: before the lock, two threads
    read each other's answers and one blocked forever on an answer already taken (a hung RL step)."""
    from concurrent.futures import ThreadPoolExecutor
    cases = [(f"\\boxed{{\\frac{{{n}}}{{{2 * n}}}}}", n % 3 != 0) for n in range(1, 61)]  # n/2n = 1/2: right
    cases = [(resp if right else f"\\boxed{{{n}}}", right) for n, (resp, right) in enumerate(cases, 1)]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda c: verifier.score(c[0], "\\frac{1}{2}"), cases))
    assert [v.correct for v in got] == [right for _, right in cases]
    assert not any(v.timed_out for v in got)


def test_option_shuffling_is_deterministic_and_balanced():
    assert option_permutation(4, 7, "q1", 3) == option_permutation(4, 7, "q1", 3)
    assert option_permutation(4, 7, "q1", 3) != option_permutation(4, 8, "q1", 3) or \
        option_permutation(4, 7, "q1", 4) != option_permutation(4, 8, "q1", 4)
    positions = Counter(option_permutation(4, 0, f"item{i}", s).index(0) for i in range(500) for s in range(8))
    assert set(positions) == {0, 1, 2, 3}
    assert all(abs(n / 4000 - 0.25) < 0.03 for n in positions.values())  # correct option in each slot ~1/4


@pytest.mark.parametrize("text, letter", [
    ("The answer is (C)", "C"), ("the answer is C.", "C"), ("Answer: B", "B"), ("so \\boxed{D}", "D"),
    ("\\boxed{(A)}", "A"), ("\\boxed{\\text{B}}", "B"), ("C. because it glows", "C"),
    ("I think (B) is wrong.\nThe answer is (A).", "A"), ("no letter here", None), ("The answer is (Z)", None),
    ("the answer is a cat", None),
    # what real models write around the letter
    ("\\boxed{\\text{(C)}}", "C"), ("\\boxed{\\textbf{(C)}}", "C"), ("The answer is $\\text{(C)}$", "C"),
    ("\\boxed{\\mathrm{B}}", "B"), ("**Answer: (D)**", "D"), ("The answer is $\\textbf{\\text{(A)}}$.", "A"),
    ("The answer is $x$", None),
])
def test_extract_letter(text, letter):
    assert extract_letter(text, 4) == letter


def test_score_mc_maps_the_shown_letter_back_through_the_permutation():
    perm = option_permutation(4, 1, "gpqa-1", 0)
    shown_correct = LETTERS[perm.index(0)]  # where the dataset's option 0 (the correct one) was shown
    assert score_mc(f"The answer is ({shown_correct})", 0, perm).correct
    wrong = next(ch for ch in "ABCD" if ch != shown_correct)
    assert not score_mc(f"\\boxed{{{wrong}}}", 0, perm).correct
    prompt = format_mc("Which?", ("right", "w1", "w2", "w3"), perm)
    assert f"{shown_correct}. right" in prompt
