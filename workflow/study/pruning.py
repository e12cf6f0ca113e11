"""Pruning an Optuna trial between the segments of its runs, on any engine that trains in segments.

With a pruner, the study driver (driver.py) advances a trial's runs one stop at a time. A stop is an evaluated step
before the last (`eval.every`); the run's segments end there (workflow/segments.py), so a stop is reached by the
segment jobs that end at it and the evaluations of that step, as one nested `snakemake` over those targets, for
every seed of the trial at once. Then the driver reads the objective with the trial's SQL (each run's last
evaluation is this step), reports the mean over the seeds with trial.report(value, step), and asks the pruner
before the next segment is submitted. A pruned trial's later segments never run: PRUNED.json marks each of its
runs, their `runs` rows say `pruned`, and an RL job of such a run refuses to train (a rerun by hand, or another
trial of the same parameters, must not train past the pruned step).

Nothing of this runs inside a stage job: the engines know nothing of Optuna, and SLURM runs each segment as the
ordinary job it is.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from workflow.atomic import write_json
from workflow.layout import done_path, runs_file, segment_done

MARKER = "PRUNED.json"
EXIT_PRUNED = 76  # an RL job of a pruned run: not an error, not resumable


class Pruned(Exception):
    def __init__(self, step: int, value: float | None = None):
        self.step, self.value = step, value
        super().__init__(f"pruned by the Optuna study at step {step}"
                         + (f" (intermediate objective {value:.4g})" if value is not None else ""))


def marker(rl_dir: Path) -> Path:
    return Path(rl_dir) / MARKER


def refuse_if_pruned(rl_dir: Path) -> None:
    """An RL job of a run its study pruned: raise Pruned (nothing trains past the pruned step)."""
    if marker(rl_dir).is_file():
        raise Pruned(json.loads(marker(rl_dir).read_text())["step"])


def stops(run) -> list[int]:
    """The steps at which a trial of this run reports to its pruner: each evaluated step before the last at which
    a segment of the run ends (the checks of space.py make every evaluated step one), then the last step."""
    ends, last = set(run.segment_ends), run.config.rl.steps
    return [*sorted({step for step, _ in run.eval_jobs if 0 < step < last and step in ends}), last]


def targets(results_root: str | Path, runs, stop: int) -> list[str]:
    """What a nested `snakemake` makes for the trial's runs to reach `stop`: each run's segment ending there and
    its evaluations up to there (at the last stop: every evaluation, as a trial without a pruner)."""
    out = []
    for run in runs:
        last = stop >= run.config.rl.steps
        out.append(str(segment_done(results_root, "rl", run.run_id, stop)))
        out += [str(done_path(results_root, "eval", run.eval_id, run.run_id, step, group))
                for step, group in run.eval_jobs if last or step <= stop]
    return out


def mark_pruned(results_root: str | Path, rl_dirs: dict[str, Path], step: int, value: float | None,
                trial: int) -> None:
    """Mark the trial's runs pruned at `step`: PRUNED.json in each RL directory, `pruned` in each `runs` row."""
    from workflow.results.rows import rows_written_as  # (pyarrow: the driver, not a sweep's reader)
    from workflow.results.writer import write_rows
    now = dt.datetime.now(dt.timezone.utc)
    for run_id, rl_dir in rl_dirs.items():
        write_json(marker(rl_dir), {"step": step, "value": value, "trial": trial})
        stem = runs_file("rl", run_id)
        found = rows_written_as(results_root, "runs", stem)
        if found is not None:
            write_rows(results_root, "runs", stem,
                       [{**row, "status": "pruned", "error": str(Pruned(step, value)),
                         "finished_at": row.get("finished_at") or now} for row in found.to_pylist()])
