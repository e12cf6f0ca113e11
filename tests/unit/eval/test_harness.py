"""The eval harness on real benchmark loaders (fixtures) with a scripted generation backend: per-sample rows,
option shuffling per sample, math-verify scoring, and scores that SQL over eval_samples reproduces."""

from __future__ import annotations

import re

import pytest

from helpers import REPO
from workflow.config import EvalConfig, TaskConfig
from workflow.benchmarks import graders
from workflow.eval.backends import Sample
from workflow.eval.harness import evaluate, run_benchmark
from workflow.benchmarks.catalog import load
from workflow.results.catalog import query

FIX = REPO / "tests" / "fixtures" / "benchmarks"
K = 4


class ScriptedBackend:
    """Answers right on even sample indices and wrong on odd ones, in an equivalent-but-different form for math
    (so math-verify, not string equality, decides), by reading the options it was shown for multiple choice."""

    tokenizer = None  # no chat template: prompts are used as rendered

    def __init__(self, gold_by_question: dict[str, str], right_text: dict[str, str]):
        self.gold, self.right_text, self.prompts = gold_by_question, right_text, []

    def generate(self, prompts, n, temperature, top_p, max_tokens, seed):
        self.prompts += prompts
        out, seen = [], {}
        for p in prompts:
            if n == 1:  # multiple choice: one prompt per sample, options in that sample's order
                question = next(q for q in self.right_text if q in p)
                letter = re.search(rf"^([A-J])\. {re.escape(self.right_text[question])}$", p, re.M).group(1)
                wrong = "A" if letter != "A" else "B"
                idx = seen[question] = seen.get(question, -1) + 1  # the sample index of this prompt
                out.append([Sample(f"The answer is ({letter if idx % 2 == 0 else wrong})", 5, False)])
            else:
                gold = next(g for q, g in self.gold.items() if q in p)
                out.append([Sample(f"so \\boxed{{{gold} + 0}}" if j % 2 == 0 else "\\boxed{-1}", 7, j == 3)
                            for j in range(n)])
        return out


def test_math_benchmark_rows_and_scores():
    items = load("math500", path=FIX / "math500.jsonl")
    backend = ScriptedBackend({it.question: it.answer for it in items}, {})
    ev = EvalConfig(k=K, bootstrap=200)
    with graders.make("math_verify") as grader:
        rows, by_k = run_benchmark(backend, "math500", items, ev, grader)
    assert {r["grader"] for r in rows} == {"math_verify"}
    assert len(rows) == len(items) * K
    assert [r["correct"] for r in rows[:K]] == [True, False, True, False]  # "\frac{3}{4} + 0" == "\frac{3}{4}"
    assert by_k[1]["avg_at_k"] == pytest.approx(0.5) and by_k[4]["pass_at_k"] == 1.0
    assert by_k[1]["truncated_frac"] == pytest.approx(0.25) and by_k[1]["timeout_frac"] == 0.0
    assert by_k[1]["avg_ci_low"] <= 0.5 <= by_k[1]["avg_ci_high"]
    assert all("Please reason step by step" in p for p in backend.prompts)


def test_multiple_choice_shuffles_per_sample_and_scores_through_the_permutation():
    items = load("mmlu_pro", path=FIX / "mmlu_pro.jsonl")
    backend = ScriptedBackend({}, {it.question: it.choices[int(it.answer)] for it in items})
    rows, by_k = run_benchmark(backend, "mmlu_pro", items, EvalConfig(k=K, bootstrap=200), graders.make("mc_letter"))
    assert [r["correct"] for r in rows] == [True, False, True, False] * len(items)
    assert all(r["shuffle_seed"] == 0 for r in rows)
    orders = {p.split("\n\n")[1] for p in backend.prompts if "capital of France" in p}
    assert len(orders) == K  # each sample saw its own option order
    assert by_k[1]["avg_at_k"] == pytest.approx(0.5)


def test_evaluate_writes_tables_that_sql_recomputes(tmp_results):
    arith = TaskConfig(n_heldout=16)
    items = load("gsm8k", path=FIX / "gsm8k.jsonl")
    ev = EvalConfig(benchmarks=["gsm8k", "arc_c"], k=K, bootstrap=100,
                    paths={"gsm8k": str(FIX / "gsm8k.jsonl"), "arc_c": str(FIX / "arc_c.jsonl")})
    arc = load("arc_c", path=FIX / "arc_c.jsonl")
    backend = ScriptedBackend({it.question: it.answer for it in items},
                              {it.question: it.choices[int(it.answer)] for it in arc})
    evaluate(backend, arith, ev, 40, results_root=tmp_results, sweep="h", run_id="0000000000a1", eval_id="0000000000e1")
    recomputed = query("""
        SELECT benchmark, avg(correct::INT) AS avg_at_k FROM eval_samples GROUP BY benchmark ORDER BY benchmark
    """, tmp_results).to_pylist()
    stored = query("SELECT benchmark, avg_at_k FROM eval_scores WHERE k = 1 ORDER BY benchmark",
                   tmp_results).to_pylist()
    assert recomputed == stored == [{"benchmark": "arc_c", "avg_at_k": 0.5}, {"benchmark": "gsm8k", "avg_at_k": 0.5}]


def test_a_missing_dataset_fails_before_any_generation(tmp_results):
    class NeverCalled:
        tokenizer = None

        def generate(self, *a, **k):
            raise AssertionError("generation started before all datasets were checked")

    from workflow.hub import DatasetUnavailable
    ev = EvalConfig(benchmarks=["gsm8k", "aime24"], paths={"gsm8k": str(FIX / "gsm8k.jsonl"),
                                                            "aime24": "/nonexistent/aime24.jsonl"})
    with pytest.raises(DatasetUnavailable, match="aime24.jsonl: file not found"):
        evaluate(NeverCalled(), TaskConfig(), ev, 1, results_root=tmp_results, sweep="h", run_id="r", eval_id="e")
