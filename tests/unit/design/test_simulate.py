"""The test of the test, small enough for CI: simulated null designs (no training) must hold the family-wise error
at the level, and a planted fault (a fixed-sample test at every look, uncorrected) must fail the same check, so the
check can fail. bench/seeds_on_demand.py runs the full version (>= 1,000 designs, the alternative, GPU-hours saved)."""

from __future__ import annotations

from workflow.design.simulate import RepeatedFixedTest, adastop, collapsing, normal, simulate

ALPHA, N, K, DESIGNS = 0.05, 3, 4, 300


def test_the_level_holds_under_the_null_for_normal_and_collapsing_seeds():
    for scores in (normal(0.0), collapsing(0.0)):
        out = simulate(adastop(N, K, ALPHA, paths=2000), [scores] * 3, [0.0] * 3, N, DESIGNS, seed=11)
        assert out.level_held(ALPHA), out
        assert out.rounds == K  # under the null nothing is decided: every design runs to its last round


def test_a_fixed_test_at_every_look_fails_the_same_check():
    fault = lambda settings, d: RepeatedFixedTest(settings, N, K, ALPHA, paths=500, seed=d)  # noqa: E731
    out = simulate(fault, [normal(0.0)] * 3, [0.0] * 3, N, DESIGNS, seed=11)
    assert not out.level_held(ALPHA), out


def test_a_real_difference_is_found_and_stops_early():
    out = simulate(adastop(5, K, ALPHA, paths=2000), [normal(0.0), normal(2.0)], [0.0, 2.0], 5, 100, seed=5)
    assert out.power > 0.8 and out.error == 0
    assert out.rounds < 2.0  # two sds apart: most designs stop at round 1 of 4
