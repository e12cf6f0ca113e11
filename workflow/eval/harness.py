"""The eval stage: for each benchmark, k samples per problem, scored per sample into eval_samples, aggregated
into eval_scores (avg@k, unbiased pass@k, maj@k with bootstrap 95% intervals, lengths, truncation, timeouts).

Everything in eval_scores can be recomputed from eval_samples with SQL.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from workflow.config import EvalConfig, TaskConfig
from workflow.benchmarks import catalog, graders
from workflow.benchmarks.catalog import Item
from workflow.benchmarks.graders import Grader
from workflow.benchmarks.metrics import benchmark_scores
from workflow.benchmarks.prompts import render
from workflow.benchmarks.scoring import format_mc, option_permutation
from workflow.layout import eval_file
from workflow.progress import say
from workflow.results.rows import rows_written_as
from workflow.results.writer import write_rows

if TYPE_CHECKING:  # the backends import torch: a rescore (load_items) never needs them
    from workflow.eval.backends import GenerationBackend


def run_benchmark(backend: GenerationBackend, name: str, items: list[Item], ev: EvalConfig,
                  grader: Grader) -> tuple[list[dict], dict]:
    """Generate and score one benchmark with its grader. Returns per-sample rows and per-k scores (without the run
    key). Prompts go through the backend's tokenizer's chat template when it has one (a real model's)."""
    b = catalog.get(name)
    template, tokenizer = b.template or ev.template, backend.tokenizer
    if b.kind == "math":
        prompts = [render(it.question, template, tokenizer) for it in items]
        groups = backend.generate(prompts, n=ev.k, temperature=ev.temperature, top_p=ev.top_p,
                                  max_tokens=ev.max_new_tokens, seed=ev.seed)
        perms: list[list[list[int] | None]] = [[None] * ev.k for _ in items]
    else:  # every sample sees its own option order, so each (item, sample) is its own prompt
        perms = [[option_permutation(len(it.choices), ev.seed, it.id, j) for j in range(ev.k)] for it in items]
        prompts = [render(format_mc(it.question, it.choices, perm), template, tokenizer)
                   for it, ps in zip(items, perms) for perm in ps]
        flat = backend.generate(prompts, n=1, temperature=ev.temperature, top_p=ev.top_p,
                                max_tokens=ev.max_new_tokens, seed=ev.seed)
        groups = [[flat[i * ev.k + j][0] for j in range(ev.k)] for i in range(len(items))]

    rows = []
    for it, group, item_perms in zip(items, groups, perms):
        for j, (s, perm) in enumerate(zip(group, item_perms)):
            v = grader.grade(s.text, it.answer, perm, it.choices)
            rows.append({"benchmark": name, "grader": grader.name, "problem_id": it.id, "sample_idx": j,
                         "correct": v.correct,
                         "response_len": s.n_tokens, "extracted": v.extracted, "truncated": s.truncated,
                         "response": s.text, "timed_out": v.timed_out,
                         "shuffle_seed": ev.seed if perm is not None else None})
    correct = np.array([r["correct"] for r in rows], dtype=bool).reshape(len(items), ev.k)
    answers = [[r["extracted"] for r in rows[i * ev.k:(i + 1) * ev.k]] for i in range(len(items))]
    by_k = benchmark_scores(correct, answers, n_boot=ev.bootstrap, seed=ev.seed)
    common = {"n_problems": len(items), "n_samples": ev.k,
              "mean_len": float(np.mean([r["response_len"] for r in rows])),
              "truncated_frac": float(np.mean([r["truncated"] for r in rows])),
              "timeout_frac": float(np.mean([r["timed_out"] for r in rows]))}
    return rows, {k: {**v, **common} for k, v in by_k.items()}


def load_items(name: str, ev: EvalConfig, task: TaskConfig) -> list[Item]:
    return catalog.load(name, path=ev.paths.get(name), revision=ev.revisions.get(name), task=task,
                           limit=ev.n_problems)


def evaluate(backend: GenerationBackend, task: TaskConfig, ev: EvalConfig, step: int, *, results_root: Path,
             sweep: str, run_id: str, eval_id: str,
             names: list[str] | None = None) -> dict[str, dict[int, dict[str, float]]]:
    # every dataset is checked before any generation: a missing one fails the job in seconds, not after hours
    items = {name: load_items(name, ev, task) for name in (names or ev.benchmarks)}
    key = {"run_id": run_id, "eval_id": eval_id, "sweep": sweep, "step": step}
    results = {}
    with ExitStack() as open_graders:  # one grader (one worker process) per grader name for the whole job
        made: dict[str, Grader] = {}
        for name, its in items.items():
            say(f"[bold cyan]eval {run_id}[/] {name}: {len(its)} problems x {ev.k} samples at T={ev.temperature}")
            grader_name = catalog.get(name).grader
            if grader_name not in made:
                made[grader_name] = open_graders.enter_context(graders.make(grader_name, ev.verify_timeout_s))
            rows, by_k = run_benchmark(backend, name, its, ev, made[grader_name])
            file = eval_file(run_id, eval_id, step, name)
            write_rows(results_root, "eval_samples", file, [{**key, **r} for r in rows])
            write_rows(results_root, "eval_scores", file,
                       [{**key, "benchmark": name, "grader": grader_name, "k": k, **v} for k, v in by_k.items()])
            say(f"[bold cyan]eval {run_id}[/] {name}: avg@{ev.k}={by_k[1]['avg_at_k']:.3f} "
                f"[{by_k[1]['avg_ci_low']:.3f}, {by_k[1]['avg_ci_high']:.3f}] "
                f"pass@{ev.k}={by_k[ev.k]['pass_at_k']:.3f}")
            results[name] = by_k
    return results


def copy_evaluation(source_run: str, source_eval: str, step: int, names: list[str], *, results_root: Path,
                    sweep: str, run_id: str, eval_id: str) -> None:
    """Another run's evaluation at `step` as this run's: its eval_samples and eval_scores rows of each benchmark
    under this run's ids (a step-0 evaluation of a starting checkpoint several runs share; Sweep.start_sources)."""
    for name in names:
        for table in ("eval_samples", "eval_scores"):
            source = eval_file(source_run, source_eval, step, name)
            found = rows_written_as(results_root, table, source)  # its own file, or a pack
            if found is None:
                raise FileNotFoundError(f"{source}: the {table} of run "
                                        f"{source_run}'s step-{step} evaluation on {name} that this job copies is "
                                        "missing (rlsweep doctor checks the tables)")
            rows = [{**r, "run_id": run_id, "eval_id": eval_id, "sweep": sweep} for r in found.to_pylist()]
            write_rows(results_root, table, eval_file(run_id, eval_id, step, name), rows)
        say(f"[bold cyan]eval {run_id}[/] {name}: step {step} copied from run {source_run} (the same start)")
