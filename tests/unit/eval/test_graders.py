"""Graders: each one's verdict on a hand-labelled corpus of answers where graders are known to differ is pinned, and
listing graders changes no id. (`rlsweep rescore` end to end: tests/e2e/test_workflow_e2e.py, on the sweep that test
runs anyway.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from helpers import REPO

from workflow.benchmarks import graders

CORPUS = yaml.safe_load((REPO / "tests" / "fixtures" / "graders" / "corpus.yaml").read_text())


@pytest.fixture(scope="module")
def judges():
    made = {name: graders.make(name) for name in graders.GRADERS}
    yield made
    for g in made.values():
        g.close()


@pytest.mark.parametrize("item", CORPUS, ids=[c["id"] for c in CORPUS])
def test_each_graders_verdict_on_the_corpus_is_pinned(judges, item):
    assert set(item["verdicts"]) == {n for n, cls in graders.GRADERS.items() if item["kind"] in cls.kinds}
    for name, expected in item["verdicts"].items():
        if item["kind"] == "math":
            verdict = judges[name].grade(item["response"], item["gold"])
        else:
            verdict = judges[name].grade(item["response"], str(item["answer"]), item["shown"], tuple(item["choices"]))
        assert verdict.correct is expected, f"{name} on {item['id']}: {verdict}"


def test_the_corpus_covers_every_kind_of_disagreement_and_the_graders_do_disagree():
    about = {c["about"] for c in CORPUS}
    for kind in ("fractions/decimals", "percent", "intervals", "x = 3", "units", "\\text{}", "matrices",
                 "multiple answers", "LaTeX spacing", "MC letters vs option text"):
        assert kind in about
    split = [c["id"] for c in CORPUS if len(set(c["verdicts"].values())) > 1]
    assert len(split) >= 10
    # against the human label: the graders differ in how often they are right (the reason to report several)
    right = {name: sum(c["verdicts"][name] == c["truth"] for c in CORPUS if name in c["verdicts"])
             for name in ("math_verify", "math_equal", "dapo", "exact")}
    assert len(set(right.values())) > 1


def test_verls_copy_of_math_equal_never_compares_symbolically_which_is_why_ours_exists():
    """verl 0.9.1's prime_math.grader.math_equal wraps its sympy step in `with timeout_limit(...)`, a decorator:
    the error is swallowed and "1/2" vs "0.5" is wrong. If this fails, verl fixed it: consider using theirs."""
    from verl.utils.reward_score.prime_math.grader import math_equal as verls
    from workflow.benchmarks.math_equal import math_equal as ours
    for pred, gold in (("1/2", "0.5"), ("x^2+2x+1", "(x+1)^2")):
        assert ours(pred, gold) and not verls(pred, gold)


def test_an_unknown_grader_is_refused_with_the_known_ones():
    from workflow.config import EvalConfig
    known = "known: dapo, exact, math_equal, math_verify, mc_letter, mc_text"
    with pytest.raises(ValueError, match=f"unknown grader 'mathverify'; {known}"):
        graders.make("mathverify")
    with pytest.raises(ValueError, match=rf"unknown grader\(s\) \['mathverify'\]; {known}"):
        EvalConfig(graders=["mathverify"])
    assert graders.rescores("math_equal", "math500") and not graders.rescores("math_verify", "math500")
    assert not graders.rescores("math_equal", "arc_c") and graders.rescores("mc_text", "arc_c")


def test_listing_graders_changes_no_run_or_eval_id(tmp_path):
    from workflow.sweep.expand import load_sweep
    sweep = Path("sweeps/demo.yaml")
    copy = tmp_path / "demo.yaml"
    copy.write_text(sweep.read_text().replace("  eval:", "  eval:\n    graders: [math_equal, dapo]", 1))
    before, after = load_sweep(sweep), load_sweep(copy)
    assert after.runs[0].config.eval.graders == ["math_equal", "dapo"]
    assert [(r.run_id, r.eval_id, r.sft_id) for r in after.runs] == [(r.run_id, r.eval_id, r.sft_id)
                                                                      for r in before.runs]


def test_eval_graders_all_is_every_known_grader_and_a_sweep_rescores_with_each(tmp_path):
    """Issue 82, item 8: `eval.graders: all` instead of listing every grader's name."""
    from helpers import write_sweep
    from workflow.benchmarks.graders import GRADERS
    from workflow.sweep.expand import load_sweep
    [run] = load_sweep(write_sweep(tmp_path / "g.yaml", "g", "base:\n  eval: {graders: all}\n", base="")).runs
    assert run.config.eval.graders == list(GRADERS)
    named = load_sweep(write_sweep(tmp_path / "n.yaml", "g", "base:\n  eval: {graders: [%s]}\n"
                                   % ", ".join(GRADERS), base="")).runs[0]
    assert run.rescore_jobs() == named.rescore_jobs() and run.eval_id == named.eval_id
