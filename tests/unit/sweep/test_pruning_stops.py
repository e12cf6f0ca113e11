"""Where a trial's runs stop for its pruner (workflow/study/pruning.py, issue 61): at each evaluated step before the
last that a segment ends at, then at the last; and what a nested snakemake makes to reach each stop."""

from __future__ import annotations

from helpers import TINY_BASE, write_sweep
from workflow.layout import done_path, segment_done
from workflow.study.pruning import stops, targets
from workflow.sweep.expand import load_sweep


def _run(tmp_path, rl_extra: str, every: int = 2):
    base = (TINY_BASE.replace("rl: {steps: 4,", "rl: {steps: 6,")
            .replace("checkpoint_every: 2}", f"checkpoint_every: 1{rl_extra}}}")
            .replace("eval: {k: 2, max_new_tokens: 16}", f"eval: {{k: 2, max_new_tokens: 16, every: {every}}}"))
    [run] = load_sweep(write_sweep(tmp_path / "s.yaml", "s", base=base)).runs
    return run


def test_a_trial_stops_at_each_evaluated_segment_end_then_at_its_last_step(tmp_path):
    run = _run(tmp_path, ", segment_steps: 3")
    assert run.segment_ends == [2, 3, 4, 6]
    assert stops(run) == [2, 4, 6]  # not at 3: nothing is evaluated there


def test_a_run_in_one_job_has_only_its_last_stop(tmp_path):
    assert stops(_run(tmp_path, ", segment_steps: 0")) == [6]


def test_each_stop_makes_the_segment_ending_there_and_the_evaluations_up_to_it(tmp_path):
    run, root = _run(tmp_path, ""), tmp_path / "results"
    evals = {step: str(done_path(root, "eval", run.eval_id, run.run_id, step, group)) for step, group in run.eval_jobs}
    assert sorted(evals) == [2, 4, 6]
    assert targets(root, [run], 2) == [str(segment_done(root, "rl", run.run_id, 2)), evals[2]]
    assert targets(root, [run], 4) == [str(segment_done(root, "rl", run.run_id, 4)), evals[2], evals[4]]
    assert targets(root, [run], 6) == [str(segment_done(root, "rl", run.run_id, 6)), *evals.values()]
