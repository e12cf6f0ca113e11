"""`rlsweep track`: send a sweep's trackers whatever the store holds that they lack.

The store is the source of truth; a tracker is one of its outputs. This reads the sweep's training jobs (their runs
rows: stage, id, label, seed, method, settings), their `train_steps` rows and their evaluations (`eval_scores`), and
for each job's tracker run sends only the points it does not hold (base.Tracker.logged), so running it twice logs
nothing twice. It fills in a finished sweep's history, what a job's trackers missed (a server that was down, a job
killed before its trackers caught up), and the stages a sweep reused from another sweep (the sweep's last job, the
aggregate stage, runs it for the sweep's own trackers).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from workflow.results.catalog import Catalog, QueryError
from workflow.tracking.base import make
from workflow.tracking.bounds import bounded
from workflow.tracking.runs import eval_points, grade_points, tracked_run, train_points

TRAINING = ("pretrain", "sft", "rl")


@dataclass
class Sent:
    """What one backend got."""

    backend: str
    runs: int = 0
    points: int = 0
    already: int = 0  # points it held before
    errors: list[str] = field(default_factory=list)
    off: bool = False  # a failure switched it off for the rest of the call


def track(results_root: str | Path, sweep: str, settings: dict[str, dict[str, Any]], planned=(),
          say: Callable[[str], None] = print) -> list[Sent]:
    """Send each backend of `settings` ({name: its tracking settings}) what it lacks of `sweep`'s training jobs. A
    backend's first failure switches it off for the rest of this call, with one line (bounds.py bounds how long that
    failure takes): a server that is down costs one bounded request, not one per run, and the next call sends the
    rest."""
    bounded()
    catalog = Catalog(results_root, sweep, planned=planned)
    try:
        jobs = catalog.query("SELECT stage, run_id, label, seed, method, config, status FROM runs WHERE stage IN "
                             "('pretrain', 'sft', 'rl') ORDER BY stage, label, seed, run_id").to_pylist()
        train = catalog.query("SELECT * FROM train_steps ORDER BY stage, run_id, step").to_pylist()
        scores = catalog.query("SELECT * FROM eval_scores").to_pylist()
        grades = catalog.query("SELECT run_id, step, benchmark, grader, avg(correct::INT) AS accuracy FROM eval_grades "
                               "GROUP BY ALL").to_pylist()
    except QueryError:  # nothing has run yet
        jobs, train, scores, grades = [], [], [], []
    rows = defaultdict(list)
    for r in train:
        rows[r["stage"], r["run_id"]].append({k: v for k, v in r.items() if v is not None})
    evals, regraded = defaultdict(list), defaultdict(list)
    for r in scores:
        evals[r["run_id"]].append(r)
    for r in grades:
        regraded[r["run_id"]].append(r)
    out = []
    for backend, backend_settings in settings.items():
        sent = Sent(backend)
        for job in jobs:
            run = tracked_run(job["stage"], job["run_id"], json.loads(job["config"] or "{}"), label=job["label"],
                              seed=job["seed"], sweep=sweep, method=job["method"])
            points = train_points(rows[job["stage"], job["run_id"]])
            if job["stage"] == "rl":
                points += eval_points(evals[job["run_id"]]) + grade_points(regraded[job["run_id"]])
            if not points:
                continue
            try:
                tracker = make(backend, backend_settings, sweep, results_root)
                tracker.open(run)
                held = tracker.logged()
                fresh = [p for p in points if (p.key, p.step) not in held]
                if fresh:
                    tracker.log(fresh)
                tracker.close(finished=job["status"] == "completed")
            except Exception as e:  # noqa: BLE001 - the backend is off for the rest of this call (as a job's)
                sent.errors.append(f"{run.name}: {type(e).__name__}: {str(e)[:300]}")
                sent.off = True
                break
            sent.runs += 1
            sent.points += len(fresh)
            sent.already += len(points) - len(fresh)
        say(f"{backend}: {sent.runs} tracker runs, {sent.points} points sent, {sent.already} already there"
            + (f"; off after a failure ({sent.errors[0]}): the next `rlsweep track` sends the rest"
               if sent.off else ""))
        out.append(sent)
    return out
