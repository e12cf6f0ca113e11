"""The sequential test's behaviour a design relies on: the floor on n, decisions only where the data says so, the
same decisions from the same values, a replay of recorded rounds equal to an uninterrupted run, pairs open at the
last round ending `equal`, and bad values refused with the setting named."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from workflow.design.adastop import CONTINUE, EQUAL, LARGER, SMALLER, Comparator, replay
from workflow.sweep.design_spec import can_decide_at, first_deciding_look, smallest_n_for_first_look


def run_design(comparator, draw, rng):
    """Rounds until the test stops; returns the rounds as recorded (only the settings each round trained)."""
    values = {s: [] for s in comparator.settings}
    rounds = []
    while not comparator.finished:
        this = {s: list(draw(s, rng, comparator.n)) for s in comparator.in_play}
        for s, v in this.items():
            values[s] += v
        rounds.append(this)
        comparator.look(values)
    return rounds


def test_the_floor_on_n_is_the_exact_two_sided_one():
    # C(2n, n) splits, of which the identity and its mirror always tie: the first look can reject iff 2 / C <= alpha/K
    assert [smallest_n_for_first_look(K, 0.05) for K in (1, 3, 5)] == [4, 5, 5]  # C(8,4)=70: 2/70 <= .05, not .05/3
    assert can_decide_at(1, 4, 1, 0.05) and not can_decide_at(1, 3, 1, 0.05)  # C(6,3) = 20: 2/20 > 0.05
    assert first_deciding_look(4, 3, 0.05) == 2  # 2/70^2 <= 2 * 0.05 / 3
    assert first_deciding_look(1, 5, 0.05) is None and first_deciding_look(1, 6, 0.05) == 6  # 2/2^6 <= 0.05


def test_a_first_look_below_the_floor_never_rejects_and_at_the_floor_does():
    huge = {"a": [0.0] * 4, "b": [100.0] * 4}
    below = Comparator(["a", "b"], n=4, K=3, alpha=0.05)  # the first look cannot reject, the second can
    assert below.look(huge) == {("a", "b"): CONTINUE}
    at = Comparator(["a", "b"], n=4, K=1, alpha=0.05)
    assert at.look(huge) == {("a", "b"): SMALLER}  # a below b
    assert Comparator(["a", "b"], n=4, K=1, alpha=0.05).look({"a": [100.0] * 4, "b": [0.0] * 4}) == {("a", "b"): LARGER}


def test_a_clear_difference_is_decided_early_and_an_equal_pair_runs_to_the_last_round():
    means = {"grpo": 0.0, "sfpo": 0.0, "gxpo": 3.0}
    c = Comparator(list(means), n=5, K=4, alpha=0.05, seed=7)
    rounds = run_design(c, lambda s, rng, n: rng.normal(means[s], 1.0, n), np.random.default_rng(0))
    assert c.decisions[("grpo", "gxpo")] == SMALLER and c.decisions[("sfpo", "gxpo")] == SMALLER
    decided_at = {p: lk.round for lk in c.looks for p in lk.decided}
    assert decided_at[("grpo", "gxpo")] < 4 and decided_at[("sfpo", "gxpo")] < 4  # before the last round
    assert c.decisions[("grpo", "sfpo")] == EQUAL and len(rounds) == 4  # the equal pair: to K
    last = max(decided_at[("grpo", "gxpo")], decided_at[("sfpo", "gxpo")])
    assert all("gxpo" not in r for r in rounds[last:])  # gxpo trains no seed once its pairs are decided


def test_same_values_same_decisions_and_replay_equals_an_uninterrupted_run():
    means = {"a": 0.0, "b": 0.6, "c": 1.2}
    draw = lambda s, rng, n: rng.normal(means[s], 1.0, n)  # noqa: E731
    for seed in range(6):
        c = Comparator(list(means), n=3, K=5, alpha=0.05, seed=seed, paths=3000)
        rounds = run_design(c, draw, np.random.default_rng(seed))
        again = replay(rounds, settings=list(means), n=3, K=5, alpha=0.05, seed=seed, paths=3000)
        assert again.decisions == c.decisions
        assert [(lk.decided, lk.boundary, lk.spent) for lk in again.looks] == \
               [(lk.decided, lk.boundary, lk.spent) for lk in c.looks]
        # a replay of the first rounds only is the state a driver killed after them had: the next look agrees
        if len(rounds) > 1:
            part = replay(rounds[:-1], settings=list(means), n=3, K=5, alpha=0.05, seed=seed, paths=3000)
            values = {s: [x for r in rounds for x in r.get(s, [])] for s in means}
            part.look(values)
            assert part.decisions == c.decisions


def test_the_level_is_spent_linearly_and_never_beyond_alpha():
    rng = np.random.default_rng(3)
    c = Comparator(["a", "b", "c"], n=5, K=4, alpha=0.05, seed=1)
    values = {s: [] for s in c.settings}
    while not c.finished:
        for s in c.in_play:
            values[s] += list(rng.normal(size=5))
        c.look(values)
        assert c.spent <= 0.05 * c.round / 4 + 1e-12


def test_bad_values_are_refused_naming_the_setting():
    c = Comparator(["a", "b"], n=3, K=2, alpha=0.05)
    with pytest.raises(ValueError, match=r"'b' has 2 value\(s\).*must have 3"):
        c.look({"a": [1, 2, 3], "b": [1, 2]})
    with pytest.raises(ValueError, match="'a' has a value that is not a finite number"):
        c.look({"a": [1, float("nan"), 3], "b": [1, 2, 3]})
    with pytest.raises(ValueError, match=r"alpha must be in \(0, 1\)"):
        Comparator(["a", "b"], n=3, K=2, alpha=1.0)
    done = Comparator(["a", "b"], n=4, K=1, alpha=0.05)
    done.look({"a": [0.0] * 4, "b": [1.0] * 4})
    with pytest.raises(ValueError, match="no look is left"):
        done.look({"a": [0.0] * 8, "b": [1.0] * 8})


def test_only_the_pairs_asked_for_are_tested():
    c = Comparator(["base", "x", "y"], n=4, K=1, alpha=0.05, pairs=[("base", "x"), ("base", "y")])
    out = c.look({"base": [0.0] * 4, "x": [50.0] * 4, "y": [100.0] * 4})
    assert set(out) == {("base", "x"), ("base", "y")}
    assert all(v == SMALLER for v in out.values())


def test_ties_never_reject():
    """Discrete metrics tie: equal values on both sides are no evidence, whatever the split."""
    c = Comparator(["a", "b"], n=4, K=1, alpha=0.05)
    assert c.look({"a": [0.5] * 4, "b": [0.5] * 4}) == {("a", "b"): EQUAL}
