"""The eval stage: sample k responses per held-out problem, score them, write eval_samples + eval_scores."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from workflow.config import EvalConfig, TaskConfig
from workflow.engines import Engine
from workflow.eval.answers import extract_boxed
from workflow.eval.metrics import scores
from workflow.progress import say
from workflow.results.writer import write_rows
from workflow.tasks.arithmetic import reward, split

BENCHMARK = "arithmetic"


def evaluate(engine: Engine, cfg: dict, ckpt: Path, step: int, *, results_root: Path, sweep: str,
             run_id: str, eval_id: str) -> dict[int, dict[str, float]]:
    task, ev = TaskConfig(**cfg["task"]), EvalConfig(**cfg["eval"])
    problems = split(task).heldout[: ev.n_problems]
    say(f"[bold cyan]eval {run_id}[/] {len(problems)} problems x {ev.k} samples at T={ev.temperature}")
    samples = engine.generate(ckpt, [p.prompt for p in problems], n=ev.k, temperature=ev.temperature,
                              max_new_tokens=ev.max_new_tokens, seed=ev.seed)
    key = {"run_id": run_id, "eval_id": eval_id, "sweep": sweep, "step": step, "benchmark": BENCHMARK}
    rows = []
    for p, group in zip(problems, samples):
        for i, s in enumerate(group):
            rows.append({**key, "problem_id": p.id, "sample_idx": i, "correct": reward(s.text, p.answer) == 1.0,
                         "response_len": s.n_tokens, "extracted": extract_boxed(s.text), "truncated": s.truncated,
                         "response": s.text})
    correct = np.array([r["correct"] for r in rows]).reshape(len(problems), ev.k)
    lengths = np.array([r["response_len"] for r in rows], dtype=float)
    trunc = float(np.mean([r["truncated"] for r in rows]))
    by_k = scores(correct)
    score_rows = [{**key, "k": k, **v, "n_problems": len(problems), "n_samples": ev.k,
                   "mean_len": float(lengths.mean()), "truncated_frac": trunc} for k, v in by_k.items()]
    name = f"{run_id}_{eval_id}_step{step:06d}"
    write_rows(results_root, sweep, "eval_samples", name, rows)
    write_rows(results_root, sweep, "eval_scores", name, score_rows)
    say(f"[bold cyan]eval {run_id}[/] avg@{ev.k}={by_k[1]['avg_at_k']:.3f} pass@{ev.k}={by_k[ev.k]['pass_at_k']:.3f}")
    return by_k
