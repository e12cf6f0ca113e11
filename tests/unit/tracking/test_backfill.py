"""`rlsweep track`: what the store holds that a tracker lacks, sent once: training steps, evaluations at their steps,
another grader's verdicts; a second run sends nothing."""

from __future__ import annotations

import json
from collections import Counter

from helpers import write_sweep
from workflow.layout import eval_file, grades_file, runs_file
from workflow.results.membership import record
from workflow.results.train_log import TrainLog
from workflow.results.writer import write_rows
from workflow.sweep.expand import load_sweep
from workflow.tracking.backfill import track


def test_a_finished_runs_history_lands_once_with_its_evaluations_and_other_graders(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path / "b.yaml", "b"))
    run, root = sweep.runs[0], tmp_path / "results"
    record(root, "b", sweep.members())
    write_rows(root, "runs", runs_file("rl", run.run_id), [{
        "run_id": run.run_id, "sweep": "b", "stage": "rl", "status": "completed", "label": run.label, "seed": 0,
        "method": "grpo", "config": json.dumps(run.stage_config("rl"))}])
    log = TrainLog(root, "b", "rl", run.run_id)
    for step in range(1, 5):
        log.record(step=step, reward=step / 4, loss=1.0)
    log.flush()
    key = {"run_id": run.run_id, "eval_id": run.eval_id, "sweep": "b", "step": 4, "benchmark": "arithmetic"}
    write_rows(root, "eval_scores", eval_file(run.run_id, run.eval_id, 4, "arithmetic"),
               [{**key, "grader": "math_verify", "k": 1, "avg_at_k": 0.5, "pass_at_k": 0.5},
                {**key, "grader": "math_verify", "k": 2, "avg_at_k": 0.5, "pass_at_k": 0.75}])
    write_rows(root, "eval_grades", grades_file(run.run_id, run.eval_id, 4, "arithmetic", "exact"),
               [{**key, "problem_id": f"p{i}", "sample_idx": 0, "grader": "exact", "correct": i < 1} for i in range(4)])
    said = []
    first = track(root, "b", {"tensorboard": {}}, planned=sweep.members(), say=said.append)
    assert (first[0].runs, first[0].points, first[0].already) == (1, 4 * 2 + 3, 0), said
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(root / "b" / "tensorboard" / f"{run.label}_{run.run_id}"),
                           size_guidance={"scalars": 0})
    acc.Reload()
    found = {t: [(e.step, round(e.value, 6)) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}
    assert Counter(s for s, _ in found["train/reward"]) == Counter([1, 2, 3, 4])
    assert found["eval/arithmetic/avg_at_2"] == [(4, 0.5)] and found["eval/arithmetic/pass_at_2"] == [(4, 0.75)]
    assert found["eval/arithmetic/exact/avg"] == [(4, 0.25)]
    again = track(root, "b", {"tensorboard": {}}, planned=sweep.members(), say=said.append)
    assert (again[0].points, again[0].already) == (0, 11) and "0 points sent, 11 already there" in said[-1]
