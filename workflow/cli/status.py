"""`rlsweep status`: each run's stage states, its score, and what a damaged table file affects."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from workflow.cli.common import err, results_root
from workflow.cli.query import warn_damaged
from workflow.layout import CHECKPOINTS, DONE, done_path, latest_checkpoint, stage_dir
from workflow.live import read_live
from workflow.results.catalog import Catalog, QueryError
from workflow.results.doctor import affected_runs
from workflow.design.recorded import add_recorded_runs
from workflow.sweep.expand import load_sweep


def stage_state(out_dir: Path, total_steps: int, status_by_id: dict[str, str], stage_id: str,
                reused_from: str | None = None, queue=None) -> str:
    if (out_dir / DONE).is_file():
        return "[green]done[/]" + (f" [dim](from {reused_from})[/]" if reused_from else "")
    recorded = status_by_id.get(stage_id)
    if recorded in ("failed", "interrupted"):
        return f"[red]{recorded}[/]"
    found = latest_checkpoint(out_dir / CHECKPOINTS)
    live = read_live(out_dir)  # the running job's step between checkpoints (workflow/live.py)
    step = max(found[0] if found else 0, live["step"] if live and recorded == "running" else 0)
    progress = f"step {step}/{total_steps}" if step else None
    if recorded == "running":
        if not alive(out_dir, queue):
            return f"[red]killed[/]{' at ' + progress if progress else ''} [dim](its process is gone)[/]"
        return f"[yellow]running{' ' + progress if progress else ''}[/]"
    if recorded == "paused":  # a segment ended; the next has not started (workflow/segments.py)
        return f"[yellow]{progress or 'paused'}, next segment pending[/]"
    return f"[yellow]{progress}[/]" if progress else "[dim]pending[/]"


class OneSqueue:
    """This user's jobs from one squeue call, made the first time a SLURM owner asks (none off SLURM); None when the
    scheduler does not answer (runlock.owner_alive then goes by the pid or the heartbeat)."""

    def __init__(self) -> None:
        self.asked, self.answer = False, None

    def get(self):
        if not self.asked:
            self.asked = True
            from workflow.watch.snapshot import squeue_now
            try:
                self.answer = squeue_now()
            except Exception:  # noqa: BLE001 - SlurmError, or no squeue on this machine
                self.answer = None
        return self.answer


def alive(out_dir: Path, queue: OneSqueue | None) -> bool:
    """Whether the process holding the stage's lock runs, by the one liveness rule (runlock.owner_alive, as watch
    asks it); a stage recorded running without a lock was killed before it could release nothing: not alive."""
    import os
    import socket
    import time

    from workflow.runlock import LOCK_NAME, STALE_S, owner_alive
    lock = out_dir / LOCK_NAME
    try:
        owner, age = json.loads(lock.read_text()), time.time() - os.stat(lock).st_mtime
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True  # being written: its owner is starting
    answer = (queue or OneSqueue()).get() if isinstance(owner, dict) and owner.get("slurm_job_id") else None
    return not isinstance(owner, dict) or owner_alive(owner, socket.gethostname(), answer, age < STALE_S)


def data_state(root: Path, sweep: str, run, status_by_id: dict[str, str]) -> str:
    """The run's data stage, and once its overlap check is done the largest benchmark overlap it found."""
    if run.data_id is None:
        return "[dim]-[/]"
    if not done_path(root, "data", run.data_id).is_file():
        recorded = status_by_id.get(run.data_id)
        return f"[red]{recorded}[/]" if recorded in ("failed", "interrupted") else f"[yellow]{recorded or 'pending'}[/]"
    check = done_path(root, "overlap", run.overlap_id) if run.overlap_id else None
    if check is None or not check.is_file():
        return "[green]done[/]"
    report = json.loads((check.parent / json.loads(check.read_text())["output"]).read_text())
    name, worst = max(((n, r["fraction"]) for n, r in report.items()), key=lambda x: x[1], default=("", 0.0))
    style = "green" if worst == 0 else "yellow"
    return f"[{style}]done[/] overlap {100 * worst:.1f}%" + (f" ({name})" if worst else "")


def cmd_status(a) -> int:
    sweep = load_sweep(a.sweep_file)
    root = results_root(a)
    add_recorded_runs(sweep, root)  # a study's trials, a design's rounds: started so far
    catalog = Catalog(root, sweep.name, planned=sweep.members())
    try:
        rows = catalog.query("SELECT stage, run_id, status, computed_by FROM runs").to_pylist()
        recorded = {r["run_id"]: r["status"] for r in rows}
        # the shared store: stages another sweep computed, which this one reuses
        reused = {(r["stage"], r["run_id"]): r["computed_by"] for r in rows
                  if r["computed_by"] not in (None, sweep.name)}
        # per run and eval settings (one RL run evaluated two ways is two rows): its last step, over benchmarks
        scores = {(r["run_id"], r["eval_id"]): r["avg"] for r in catalog.query(
            "SELECT run_id, eval_id, avg(avg_at_k) AS avg FROM eval_scores WHERE k = 1 GROUP BY run_id, eval_id, step "
            "QUALIFY step = max(step) OVER (PARTITION BY run_id, eval_id)").to_pylist()}
    except QueryError:  # nothing has run yet
        recorded, scores, reused = {}, {}, {}
    t = Table(title=f"{sweep.name}: {len(sweep.runs)} runs, {len(sweep.jobs('sft'))} SFT jobs ({sweep.path})")
    with_data, with_base = bool(sweep.jobs("data")), bool(sweep.jobs("pretrain"))
    for col in ("run_id", "method", "setting", "seed", *(["data"] if with_data else []),
                *(["base"] if with_base else []), "sft", "rl", "eval", "avg@k"):
        t.add_column(col)
    n_evaluated, queue = 0, OneSqueue()  # (one squeue call for every stage a SLURM job holds)
    for r in sweep.runs:
        cfg = r.config
        data = [data_state(root, sweep.name, r, recorded)] if with_data else []
        base = ([stage_state(stage_dir(root, "pretrain", r.pretrain_id), cfg.pretrain.steps, recorded, r.pretrain_id,
                             reused.get(("pretrain", r.pretrain_id)), queue) if r.pretrain_id else "[dim]random[/]"]
                if with_base else [])
        sft = (stage_state(stage_dir(root, "sft", r.sft_id), cfg.sft.steps, recorded, r.sft_id,
                           reused.get(("sft", r.sft_id)), queue) if r.sft_id else "[dim]off[/]")
        rl = stage_state(stage_dir(root, "rl", r.run_id), cfg.rl.steps, recorded, r.run_id,
                         reused.get(("rl", r.run_id)), queue)
        jobs = r.eval_jobs
        n_done = sum(done_path(root, "eval", r.eval_id, r.run_id, step, group).is_file()
                     for step, group in jobs)
        ev = ("[green]done[/]" if n_done == len(jobs) else f"[yellow]{n_done}/{len(jobs)} jobs[/]" if n_done
              else "[dim]pending[/]")
        n_evaluated += n_done == len(jobs)
        avg = scores.get((r.run_id, r.eval_id))
        t.add_row(r.run_id, r.method, r.label, str(cfg.seed), *data, *base, sft, rl, ev,
                  "" if avg is None else f"{avg:.3f}")
    Console(highlight=False).print(t)
    err.print(f"[dim]{n_evaluated}/{len(sweep.runs)} runs evaluated; results under {root}[/]")
    if reused:
        err.print("[dim]reused from other sweeps (the shared store): "
                  + ", ".join(f"{n} stage jobs from {name}" for name, n in sorted(Counter(reused.values()).items()))
                  + "[/]")
    _cost(sweep, root, catalog)
    _eta(sweep, root)
    affected = {d: affected_runs(d, sweep.runs) for d in catalog.damaged}
    warn_damaged(catalog.left_out, affected, root=catalog.root)
    if sweep.spec.optuna is not None:
        from workflow.results.journal import JournalDamaged  # Optuna: only for a sweep that has a study
        from workflow.study.status import study_report
        try:
            table, line = study_report(sweep.spec.optuna, root, sweep.name)
        except JournalDamaged as e:  # the runs above still show: the trial records are beside the journal
            print(f"error: study of {sweep.name}: {e}", file=sys.stderr)  # plain: a path may hold rich markup
            return 1
        if table is not None:
            Console(highlight=False).print(table)
        err.print(line)
    if sweep.spec.design is not None:
        from workflow.design.status import design_state, line as design_line, table as design_table
        state = design_state(sweep, root)
        if (t := design_table(state, sweep.spec.design)) is not None:
            Console(highlight=False).print(t)
        err.print(design_line(state))
    return 0


def _eta(sweep, root) -> None:
    """When the whole sweep will be done, as watch's header says it (workflow/watch/eta.py)."""
    from workflow.watch.snapshot import Watcher
    snap = Watcher(sweep, root).snapshot()
    if snap.eta is not None and snap.eta.jobs:
        err.print(snap.eta.text(snap.taken_at) + (" (for the trials / rounds started so far)" if
                                                  sweep.spec.optuna is not None or sweep.spec.design is not None
                                                  else ""), markup=False)


def _cost(sweep, root, catalog) -> None:
    """Per stage and RL method: what the sweep's own jobs spent, beside what `rlsweep plan` estimated when the sweep
    first ran (workflow/sweep/plan.py cost_rows)."""
    from workflow.sweep.plan import cost_cells, cost_columns, cost_rows, on_gpus
    rows, recorded_at = cost_rows(sweep, root, catalog)
    gpus = on_gpus(rows)
    # what the table below cannot count: stage jobs whose runs rows (their hours) are in a file that does not read
    uncounted = {key for d in catalog.damaged if d.table == "runs" for key in d.jobs
                 if catalog.members is None or key in catalog.members}
    if not rows:
        return
    t = Table(title="cost: used by this sweep's jobs, against the plan when it first ran"
              + (f" ({recorded_at})" if recorded_at else " (not recorded)"))
    for col in cost_columns(gpus):
        t.add_column(col, justify="left" if col in ("stage", "method", "") else "right")
    for r in rows:
        *cells, flag = cost_cells(r, gpus)
        t.add_row(*cells, f"[red]{flag}[/]" if flag else "")
    Console(highlight=False).print(t)
    if not gpus:
        err.print("[dim]hours: wall-clock on the CPU (no job ran on a GPU, and none to run will); at most: from time "
                  "limits, an upper bound; estimate now: used + the plan's estimate of what is left[/]")
    if uncounted:
        print(f"warning: the cost above leaves out {len(uncounted)} of this sweep's stage jobs: their runs rows, which "
              "hold their time and hours, are in a damaged file (below; `rlsweep doctor` says how they come back)",
              file=sys.stderr)
