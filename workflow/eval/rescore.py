"""Judge an eval job's stored responses again with another grader, without generating: rule `rescore`
(`eval.graders`, `rlsweep rescore`). Its verdicts land in the table eval_grades, one row per sample, beside the
generation-time verdict in eval_samples (which stays what it was: every other number keeps its meaning).

Each sample is judged on exactly what the model saw: the benchmark item's gold answer, and for multiple choice the
option order the sample was shown (option_permutation of its stored shuffle_seed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from pathlib import Path

from workflow.atomic import write_json
from workflow.benchmarks import catalog, graders
from workflow.eval.harness import load_items
from workflow.eval.plan import eval_groups
from workflow.benchmarks.scoring import LETTERS, option_permutation
from workflow.layout import DONE, eval_file, grades_file, rescore_path, stage_dir
from workflow.progress import say
from workflow.results.rows import rows_written_as
from workflow.results.writer import write_rows
from workflow.stages import parse_stage
from workflow.identity import stable_id

KEY = ("run_id", "eval_id", "sweep", "step", "benchmark", "problem_id", "sample_idx")


def rescore(stage, eval_id: str, step: int, group: str, grader_name: str, *, results_root: Path,
            sweep: str) -> dict[str, dict]:
    """Judge the eval job (`stage`: its parsed eval stage config) of (step, group) with `grader_name`; returns per
    benchmark {n, accuracy, default_accuracy, disagree}."""
    names = [n for n in eval_groups(stage.eval)[group] if graders.rescores(grader_name, n)]
    summary = {}
    with graders.make(grader_name, timeout_s=stage.eval.verify_timeout_s) as grader:
        for name in names:
            source = eval_file(stage.run_id, eval_id, step, name)
            found = rows_written_as(results_root, "eval_samples", source)  # its own file, or a pack
            if found is None:
                raise FileNotFoundError(f"{source}: the eval_samples "
                                        f"responses of run {stage.run_id}'s step-{step} evaluation on {name} are "
                                        "missing (rlsweep doctor checks the tables)")
            items = {it.id: it for it in load_items(name, stage.eval, stage.task)}
            samples = found.to_pylist()
            say(f"[bold cyan]rescore {stage.run_id}[/] {name} step {step}: {len(samples)} responses with {grader_name}")
            rows = []
            for s in samples:
                it = items.get(s["problem_id"])
                if it is None:
                    raise ValueError(f"{name}: problem {s['problem_id']!r} of the stored responses is not in the "
                                     "benchmark as loaded now (a different dataset revision or eval.paths file?)")
                perm = (option_permutation(len(it.choices), s["shuffle_seed"], it.id, s["sample_idx"])
                        if it.choices is not None else None)
                v = grader.grade(s["response"] or "", it.answer, perm, it.choices)
                gold = it.answer if perm is None else LETTERS[perm.index(int(it.answer))]
                rows.append({**{k: s[k] for k in KEY}, "grader": grader_name, "correct": v.correct,
                             "extracted": v.extracted, "timed_out": v.timed_out, "gold": gold})
            write_rows(results_root, "eval_grades", grades_file(stage.run_id, eval_id, step, name, grader_name),
                       rows)
            n = len(rows)
            summary[name] = {"n": n, "accuracy": sum(r["correct"] for r in rows) / max(n, 1),
                             "default_accuracy": sum(bool(s["correct"]) for s in samples) / max(n, 1),
                             "disagree": sum(r["correct"] != bool(s["correct"]) for r, s in zip(rows, samples))}
            say(f"[bold cyan]rescore {stage.run_id}[/] {name} step {step}: {grader_name} "
                f"{summary[name]['accuracy']:.3f} vs {catalog.get(name).grader} "
                f"{summary[name]['default_accuracy']:.3f} ({summary[name]['disagree']} of {n} disagree)")
    return summary


def run_rescore(results_root: Path, sweep: str, eval_id: str, cfg: dict, step: int, group: str, grader: str) -> Path:
    """The rescore job of one eval job: its verdicts into eval_grades, then its marker (rescore_path)."""
    if stable_id(cfg) != eval_id:
        raise ValueError(f"eval id {eval_id} does not match its config (hash {stable_id(cfg)})")
    stage = parse_stage("eval", cfg)
    done = stage_dir(results_root, "eval", eval_id, stage.run_id, step, group) / DONE
    if not done.is_file():
        raise FileNotFoundError(f"{done}: rescore judges a finished evaluation's responses; this one has not finished")
    summary = rescore(stage, eval_id, step, group, grader, results_root=results_root, sweep=sweep)
    out = rescore_path(results_root, eval_id, stage.run_id, step, group, grader)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, {"grader": grader, "benchmarks": summary,
                     "finished_at": dt.datetime.now(dt.timezone.utc).isoformat()})
    return out


def main(argv: list[str] | None = None) -> int:
    """`scripts/stage.py rescore ...` (rule rescore): no torch, no engine, so a job starts in a fraction of a
    second plus its grader's imports."""
    p = argparse.ArgumentParser(prog="stage.py rescore", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sweep", required=True)
    p.add_argument("--id", required=True, help="the eval id")
    p.add_argument("--config", required=True, help="the eval stage config as JSON")
    p.add_argument("--step", type=int, required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--grader", required=True, help="the grader that judges the eval job's responses again")
    p.add_argument("--results", type=Path, default=Path(os.environ.get("RLSWEEP_RESULTS", "results")))
    a = p.parse_args(argv)
    run_rescore(a.results, a.sweep, a.id, json.loads(a.config), a.step, a.group, a.grader)
    return 0
