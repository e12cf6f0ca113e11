"""Graders: each one's verdict on a hand-labelled corpus of answers where graders are known to differ is pinned;
`rlsweep rescore` and `eval.graders` judge stored responses again without generating, cached per (eval job, grader),
and leave every run id and every other number as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import planned_jobs, run_cli, snakemake, write_sweep
from workflow.eval import graders

CORPUS = yaml.safe_load((Path(__file__).parent / "fixtures" / "graders" / "corpus.yaml").read_text())


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
    from workflow.eval.math_equal import math_equal as ours
    for pred, gold in (("1/2", "0.5"), ("x^2+2x+1", "(x+1)^2")):
        assert ours(pred, gold) and not verls(pred, gold)


def test_an_unknown_grader_is_refused_with_the_known_ones():
    from workflow.config import EvalConfig
    with pytest.raises(KeyError, match="unknown grader 'mathverify'; known: math_verify, "):
        graders.make("mathverify")
    with pytest.raises(ValueError, match=r"unknown grader\(s\) \['mathverify'\]; known: math_verify"):
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


def _mtimes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def _query(results: Path, sql: str) -> list[dict]:
    out = run_cli("--results", str(results), "query", sql, "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_rescore_judges_stored_responses_without_generating_once_per_grader(tmp_path):
    sweep = write_sweep(tmp_path / "gr.yaml", "gr")
    sweep.write_text(sweep.read_text().replace("eval: {k: 2, max_new_tokens: 16}",
                                               "eval: {k: 2, max_new_tokens: 16, every: 2}"))
    res = snakemake(tmp_path, sweep)
    assert res.returncode == 0, res.stderr[-3000:]
    results = tmp_path / "results"
    evaluated = {k: v for k, v in _mtimes(results).items() if "/eval/" in f"/{k}" or "eval_samples" in k}

    bad = run_cli("--results", str(results), "rescore", str(sweep), "--graders", "nope")
    assert bad.returncode == 2 and "unknown grader(s) nope; known: math_verify" in bad.stderr

    first = run_cli("--results", str(results), "rescore", str(sweep), "--graders", "math_verify", "dapo")
    assert first.returncode == 0, first.stderr[-3000:]
    # every stored response judged once by each grader, against the same samples; nothing generated again
    counts = _query(results, "select g.grader, count(*) n, count(s.response) matched from eval_grades g "
                             "join eval_samples s using (run_id, eval_id, step, benchmark, problem_id, sample_idx) "
                             "group by all order by all")
    assert counts == [{"grader": "dapo", "n": 64, "matched": 64}, {"grader": "math_verify", "n": 64, "matched": 64}]
    assert _query(results, "select count(*) n from runs where stage = 'eval'") == [{"n": 2}]
    assert {k: v for k, v in _mtimes(results).items() if k in evaluated} == evaluated
    assert _query(results, "select distinct grader from eval_samples") == [{"grader": "exact"}]
    report = (results / "gr" / "report" / "report.md").read_text()
    assert "## Graders" in report and "math_verify" in report and "dapo" in report

    again = run_cli("--results", str(results), "rescore", str(sweep), "--graders", "math_verify", "dapo")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr

    # the sweep listing a grader: snakemake plans its rescore jobs only (the ids are the same, nothing else reruns)
    sweep.write_text(sweep.read_text().replace("max_new_tokens: 16, every: 2}",
                                               "max_new_tokens: 16, every: 2, graders: [math_equal]}"))
    plan = snakemake(tmp_path, sweep, "-n")
    assert planned_jobs(plan.stdout) == {"rescore": 2, "aggregate": 1, "report": 1, "all": 1}, \
        plan.stdout[-2000:] + plan.stderr[-2000:]
