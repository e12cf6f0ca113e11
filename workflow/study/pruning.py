"""Pruning an Optuna trial from its intermediate evals.

The driver writes, for a trial's run, a context file (study/pruning/<run_id>.json: storage, study, trial, the run's
eval jobs and the objective's SQL) and sets RLSWEEP_STUDY_PRUNING for the trial's jobs. The RL stage of that run
then, after each interval checkpoint at an eval step before the last (eval.every), runs that step's eval jobs
(through the `run_eval` it hands in: the same eval stage, writing the same tables and DONE files, so the eval jobs
Snakemake schedules after RL find them done), reads the objective with the same SQL (at that moment the run's last
eval is this step), reports it with trial.report(value, step), and stops if the pruner says so: the RL stage
raises Pruned, its runs row says "pruned", PRUNED.json marks the run, and the driver tells Optuna the trial was
pruned.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from workflow.atomic import write_json
from workflow.layout import pruning_context
from workflow.stages import stage_config

ENV = "RLSWEEP_STUDY_PRUNING"
MARKER = "PRUNED.json"
EXIT_PRUNED = 76  # the RL stage's exit status when its trial was pruned (not an error, not resumable)

# run_eval(eval_id, eval_config, label, step, group): run one eval job of the run, in this process
RunEval = Callable[[str, dict, str, int, str], Any]


class Pruned(Exception):
    def __init__(self, step: int, value: float | None = None):
        self.step, self.value = step, value
        super().__init__(f"pruned by the Optuna study at step {step}"
                         + (f" (intermediate objective {value:.4g})" if value is not None else ""))


def write_context(results_root: str | Path, sweep: str, run, *, storage: str, study: str, pruner: dict,
                  trial_id: int, trial_number: int, sql: str) -> None:
    """What the run's RL stage needs to report to the trial (`run` is the trial's Run)."""
    steps = sorted({step for step, _ in run.eval_jobs if step < run.config.rl.steps})
    write_json(pruning_context(results_root, sweep, run.run_id),
               {"storage": storage, "study": study, "pruner": pruner, "trial_id": trial_id, "trial": trial_number,
                "sql": sql, "eval_id": run.eval_id, "label": run.label, "steps": steps, "eval_jobs": run.eval_jobs,
                "eval_config": stage_config(run.config, "eval", run_id=run.run_id)})


def marker(rl_dir: Path) -> Path:
    return Path(rl_dir) / MARKER


def reporter_for(results_root: str | Path, sweep: str, run_id: str, rl_dir: Path,
                 run_eval: RunEval) -> Callable[[int], None] | None:
    """The RL stage's on_checkpoint hook when this run belongs to a pruned study's trial, else None."""
    if not os.environ.get(ENV):
        return None
    path = pruning_context(results_root, sweep, run_id)
    if not path.is_file():
        return None
    ctx = json.loads(path.read_text())
    if marker(rl_dir).is_file():  # pruned before (a rerun must not train on past the pruned step)
        raise Pruned(json.loads(marker(rl_dir).read_text())["step"])
    return _Reporter(ctx, Path(results_root), sweep, run_id, Path(rl_dir), run_eval)


class _Reporter:
    def __init__(self, ctx: dict[str, Any], results_root: Path, sweep: str, run_id: str, rl_dir: Path,
                 run_eval: RunEval):
        self.ctx, self.results_root, self.sweep, self.run_id, self.rl_dir = ctx, results_root, sweep, run_id, rl_dir
        self.run_eval = run_eval
        import optuna  # (optuna, and DuckDB below: only in a pruned trial's RL stage, not in every stage job)

        from workflow.study.factory import open_storage
        from workflow.study.spec import PRUNERS
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        # the study's own pruner (load_study would otherwise give a default MedianPruner)
        pruner = PRUNERS[ctx["pruner"]["name"]](**ctx["pruner"]["options"])
        study = optuna.load_study(study_name=ctx["study"], storage=open_storage(ctx["storage"]), pruner=pruner)
        self.trial = optuna.Trial(study, ctx["trial_id"])

    def __call__(self, step: int) -> None:
        if step not in self.ctx["steps"]:
            return
        for job_step, group in self.ctx["eval_jobs"]:
            if job_step == step:
                self.run_eval(self.ctx["eval_id"], self.ctx["eval_config"], self.ctx["label"], step, group)
        from workflow.study.objective import ObjectiveError, trial_value
        try:
            value = trial_value(self.ctx["sql"], self.results_root, self.sweep, [self.run_id])
        except ObjectiveError:  # nothing to report at this step (the objective reads something not there yet)
            return
        self.trial.report(value, step)
        if self.trial.should_prune():
            write_json(marker(self.rl_dir), {"step": step, "value": value, "trial": self.ctx["trial"]})
            raise Pruned(step, value)
