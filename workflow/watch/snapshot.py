"""Every run of a sweep at one moment, as `rlsweep watch` shows it: the stage its chain is at, that stage's step,
rate and metrics, its latest evaluation, and its state; with the sweep's job counts, GPU-hours and newest problems.

A `Watcher` takes one snapshot per refresh. It reads the stage directories of the store (DONE files, RUNNING.lock's
heartbeat, LIVE.json, SLURM.json), the small runs-row file of each job that is not done, and the eval jobs' DONE
files (which hold their scores), each through a cache that rereads only what changed; it makes at most one squeue
call per snapshot, and none for a sweep no SLURM job was submitted for. It writes nothing and takes no lock. A run
whose every job is done is kept as it was last seen and not looked at again.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from workflow.layout import DONE, done_path, stage_dir_text
from workflow.results.rows import runs_dir_text, runs_row_text
from workflow.slurm import cluster
from workflow.sweep.executor import executor_of
from workflow.sweep.plan import recorded_plan
from workflow.watch.eta import Eta
from workflow.watch.jobs import STATES, Files, JobView, stage_job
from workflow.watch.timing import Timing

TRAINING = ("data", "overlap", "pretrain", "sft", "rl")  # a run's stage jobs before its evaluations, in order
SUPERVISED_HEADLINE = ("loss",)  # what a pretraining or SFT job shows
RL_HEADLINE = ("reward", "entropy")  # what every RL job shows, then its methods' cards' headline numbers


@dataclass
class RunLine:
    """One run as a line of the view."""

    run_id: str
    label: str
    seed: int
    method: str
    state: str  # one of jobs.STATES: the state of the job the run waits on (done: every job is)
    stage: str = ""  # the stage its chain is at ("" once every job is done)
    detail: str = ""  # queued: job id and reason; running: node; failed: the reason class
    step: int | None = None
    total: int | None = None
    segment: str = ""  # "2/5": the RL segment the step is in, for a run trained in segments
    s_per_step: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # headline name -> its latest value
    eval: float | None = None  # the latest evaluated step's avg@k, over its benchmarks
    eval_step: int | None = None
    log: str | None = None

    @property
    def eta_s(self) -> float | None:
        if self.s_per_step is None or self.step is None or self.total is None:
            return None
        return self.s_per_step * max(self.total - self.step, 0)


@dataclass(frozen=True)
class Problem:
    """A failed job, for the footer."""

    run: str  # the run's label and seed
    stage: str
    reason: str
    log: str | None
    when: float | None
    error: str | None = None


@dataclass
class Snapshot:
    sweep: str
    lines: list[RunLine]
    jobs: Counter  # stage jobs by state (a job several runs share counts once)
    gpu_hours: float  # ended jobs' GPU-hours (SLURM's accounting, else wall-clock x the GPUs they ran on) + running
    # jobs' so far
    problems: list[Problem]  # newest first
    notes: list[str]  # what limited this snapshot (squeue did not answer, ...)
    taken_at: float
    planned_gpu_hours: float | None = None  # what `rlsweep plan` estimated when the sweep first ran (plan.json)
    design: str | None = None  # seeds on demand: the round, each pair's state, seeds and GPU-hours (design/status.py)
    hours: float = 0.0  # wall-clock hours of the same jobs (what a sweep on the CPU counts)
    planned_hours: float | None = None
    planned_bounded: bool = False  # some of the plan came from time limits: "at most"
    eta: Eta | None = None  # the whole sweep's time left (watch/eta.py)

    @property
    def on_gpus(self) -> bool:
        """Whether the sweep's hours are GPU-hours: a job ran on a GPU, or the plan has jobs use one."""
        return self.gpu_hours > 0 or bool(self.planned_gpu_hours)

    @property
    def failed(self) -> bool:
        return self.jobs.get("failed", 0) > 0


def squeue_now() -> dict[str, cluster.JobState]:
    """This user's jobs by id, array tasks one by one: one squeue call (raises cluster.SlurmError)."""
    return cluster.parse_squeue(cluster.run(["squeue", "-h", "-r", "--me", "-o", "%i|%T|%N|%r"], retries=0,
                                            timeout_s=15))


class Watcher:
    """Snapshots of one sweep (`sweep`: workflow.sweep.expand.Sweep) under `results_root`."""

    def __init__(self, sweep, results_root: str | Path, squeue: Callable[[], dict] = squeue_now,
                 clock: Callable[[], float] = time.time):
        self.sweep, self.root, self.squeue, self.clock = sweep, Path(results_root), squeue, clock
        self.files = Files()
        self._paths: dict[tuple, tuple[str, str, str]] = {}
        self._root_text, self._runs_dir = os.fspath(self.root), runs_dir_text(self.root)
        self.finished: dict[str, tuple[RunLine, dict[tuple, JobView]]] = {}  # runs whose every job is done
        self._ended: dict[tuple, tuple[float, float, dict]] = {}  # a done job's hours, GPU-hours and runs row
        # every stage job of the sweep, once (an SFT job several runs share is one): the header's pending are
        # those of them not seen started
        self._know_runs()
        planned = recorded_plan(self.root, sweep.name)  # written once, when the sweep first ran: read once
        stages = planned["stages"].values() if planned else ()
        self.planned_gpu_hours = sum(s["gpu_hours"] for s in stages) if planned else None
        self.planned_hours = sum(s["hours"] for s in stages) if planned else None
        self.planned_bounded = any(s.get("bounded") for s in stages)
        self.timing = Timing(sweep, self.root, executor_of(self.root, sweep.name), clock)

    def _know_runs(self) -> None:
        sweep = self.sweep
        self.eval_jobs = {r.run_id: r.eval_jobs for r in sweep.runs}  # (a property computed from the config)
        self.n_jobs = (sum(len(sweep.jobs(stage)) for stage in TRAINING)
                       + sum(map(len, self.eval_jobs.values())))
        self.headlines = {r.run_id: (*RL_HEADLINE, *(c.headline for c in r.config.rl.selected if c.headline))
                          for r in sweep.runs}

    def _follow_design(self) -> str | None:
        """Seeds on demand: the rounds the driver recorded since the last refresh become lines; the design's line."""
        if self.sweep.spec.design is None:
            return None
        from workflow.design.recorded import add_recorded_runs
        from workflow.design.status import design_state, line
        from workflow.sweep.families import shown
        known = len(self.sweep.runs)
        add_recorded_runs(self.sweep, self.root)
        if len(self.sweep.runs) != known:
            self._know_runs()
        state, design = design_state(self.sweep, self.root), self.sweep.spec.design
        pairs = "; ".join(f"{shown(design, p.a)} vs {shown(design, p.b)} {p.verdict}"
                          + (f" (round {p.decided_at}, {p.seeds_a}/{p.seeds_b} seeds)" if p.decided_at else "")
                          for p in state.pairs)
        return line(state) + (f"\npairs: {pairs}" if pairs else "")

    # ----------------------------------------------------------------------------------------------------- jobs
    def _job(self, stage: str, stage_id: str, run_id: str | None = None, step: int | None = None,
             group: str | None = None) -> JobView:
        key = (stage, stage_id, run_id, step, group)
        found = self._seen.get(key)
        if found is None:
            directory, done, row = self._paths_of(key)
            found = self._seen[key] = stage_job(directory, done, row, self._squeue, self.files, self._now)
        return found

    def _paths_of(self, key: tuple) -> tuple[str, str, str]:
        """A job's directory, DONE file and runs-row file, made once, as strings (at 10,000 runs, made as Paths
        they were a third of the first refresh)."""
        found = self._paths.get(key)
        if found is None:
            stage, stage_id, run_id, step, group = key
            directory = stage_dir_text(self._root_text, stage, stage_id, run_id, step, group)
            found = self._paths[key] = (directory, f"{directory}/{DONE}",
                                        runs_row_text(self._runs_dir, stage, stage_id, step, group))
        return found

    def _squeue(self) -> dict[str, cluster.JobState] | None:
        """squeue's answer for this snapshot: asked at most once, and only when a job has a SLURM record."""
        if self._queue is None:
            try:
                self._queue = (self.squeue(),)
            except cluster.SlurmError as e:
                self._queue = (None,)
                self._notes.append(f"squeue did not answer ({str(e).strip()[:160]}): SLURM jobs shown as found")
        return self._queue[0]

    def _spent(self, key: tuple, view: JobView) -> tuple[float, float, dict | None]:
        """A job's (hours, GPU-hours) so far, and an ended job's runs row: a running one's since its live file's
        start, times the GPUs it runs on; an ended one's wall-clock, and SLURM's GPU-hours where it accounted them,
        else wall-clock x the GPUs the row says it ran on (a row from before rows said: none known, 0)."""
        if view.state == "running" and view.live:
            hours = max(self._now - view.live.get("started_at", self._now), 0) / 3600
            return hours, hours * (view.live.get("gpus") or 0), None
        if view.state == "done" and key in self._ended:  # a finished job's row is final: no stat per refresh
            return self._ended[key]
        if view.state in ("done", "failed"):
            row = self.files.runs_row(self._paths_of(key)[2]) or {}
            hours = (row.get("wall_s") or 0.0) / 3600
            gpu = row.get("gpu_hours")
            spent = hours, float(gpu if gpu is not None else hours * (row.get("gpus") or 0)), row
            if view.state == "done" and row:
                self._ended[key] = spent
            return spent
        return 0.0, 0.0, None

    # -------------------------------------------------------------------------------------------------- a run
    def _evaluation(self, run) -> tuple[float | None, int | None]:
        """The run's latest evaluated step and its avg@k over the benchmarks evaluated there (from the eval jobs'
        DONE files; one copied from another run's step-0 evaluation reads that run's)."""
        by_step: dict[int, list[float]] = {}
        for step, group in self.eval_jobs[run.run_id]:
            scores = self._scores(self._paths_of(("eval", run.eval_id, run.run_id, step, group))[1], step, group)
            if scores:
                by_step.setdefault(step, []).extend(scores)
        if not by_step:
            return None, None
        last = max(by_step)
        return sum(by_step[last]) / len(by_step[last]), last

    def _scores(self, done: str | Path, step: int, group: str) -> list[float]:
        record = self.files.json(done)
        if record is None:
            return []
        source = record.get("copied_from")
        if isinstance(source, dict) and not record.get("scores"):
            record = self.files.json(done_path(self.root, "eval", source.get("eval_id", ""), source.get("run_id"),
                                               step, group)) or {}
        scores = record.get("scores")
        return [float(v) for v in scores.values() if isinstance(v, (int, float))] if isinstance(scores, dict) else []

    def _line(self, run) -> tuple[RunLine, dict[tuple, JobView]]:
        cfg = run.config
        line = RunLine(run.run_id, run.label, cfg.seed, run.method, "done")
        jobs: dict[tuple, JobView] = {}
        current: tuple[str, JobView] | None = None
        for stage in TRAINING:
            stage_id = run.id_of(stage)
            if stage_id is None:
                continue
            view = jobs[(stage, stage_id, None, None, None)] = self._job(stage, stage_id)
            if view.state != "done":
                current = current or (stage, view)
            if current and current[1].state in ("pending", "queued") and stage != "rl":
                break  # downstream of a job that has not started: nothing there can have started either
        rl_started = current is None or current[0] == "rl"
        if rl_started:
            for step, group in self.eval_jobs[run.run_id]:
                key = ("eval", run.eval_id, run.run_id, step, group)
                view = jobs[key] = self._job(*key)
                if current is None and view.state != "done":
                    current = ("eval", view)
        training = next((s for s in ("rl", "sft", "pretrain") if run.id_of(s)), None)
        stage, view = current if current is not None else ("", None)
        shown = stage if stage in ("pretrain", "sft", "rl") else training
        live = jobs.get((shown, run.id_of(shown), None, None, None)) if shown else None
        live = live.live if live is not None else None
        if view is not None:
            line.state, line.stage, line.detail, line.log = view.state, stage, view.detail, view.log
        if stage == "eval":
            evals = [v for k, v in jobs.items() if k[0] == "eval"]
            line.state = max((v.state for v in evals if v.state != "done"), key=_urgency, default="done")
            line.detail = f"{sum(v.state == 'done' for v in evals)}/{len(evals)} eval jobs" + (
                f"; {view.detail}" if view.detail and line.state == view.state else "")
        if live is not None:
            line.step, line.total = live.get("step"), live.get("total")
            names = self.headlines[run.run_id] if shown == "rl" else SUPERVISED_HEADLINE
            line.metrics = {n: live["metrics"][n] for n in names if n in (live.get("metrics") or {})}
            if line.state == "running" and stage == shown:  # a rate only while it trains
                line.s_per_step = live.get("s_per_step")
        elif shown is not None:
            line.total = getattr(cfg, shown).steps
        if shown == "rl" and len(run.segment_ends) > 1 and line.step is not None:
            at = next((i for i, end in enumerate(run.segment_ends) if line.step < end), len(run.segment_ends) - 1)
            line.segment = f"{at + 1}/{len(run.segment_ends)}"
        line.eval, line.eval_step = self._evaluation(run)
        return line, jobs

    # --------------------------------------------------------------------------------------------- a snapshot
    def snapshot(self) -> Snapshot:
        self._now, self._seen, self._queue, self._notes = self.clock(), {}, None, []
        design = self._follow_design()
        lines, counted = [], {}
        for run in self.sweep.runs:
            kept = self.finished.get(run.run_id)
            line, jobs = kept if kept is not None else self._line(run)
            if kept is None and line.state == "done" and all(v.state == "done" for v in jobs.values()):
                self.finished[run.run_id] = (line, jobs)
            lines.append(line)
            for key, view in jobs.items():
                counted.setdefault(key, (view, line))
        jobs_by_state = Counter({s: 0 for s in STATES})
        hours, gpu_hours, problems, eval_wall = 0.0, 0.0, [], {}
        for key, (view, line) in counted.items():
            jobs_by_state[view.state] += view.state != "pending"
            h, g, row = self._spent(key, view)
            hours, gpu_hours = hours + h, gpu_hours + g
            if key[0] == "eval" and view.state == "done" and row and row.get("wall_s"):
                eval_wall[key[1:]] = row["wall_s"]
            if view.state == "failed":
                problems.append(Problem(f"{line.label} seed {line.seed}", key[0] + (f" step {key[3]}" if key[0] ==
                                                                                     "eval" else ""),
                                        view.detail, view.log, view.when, view.error))
        jobs_by_state["pending"] = max(self.n_jobs - sum(jobs_by_state.values()), 0)
        problems.sort(key=lambda p: p.when or 0.0, reverse=True)
        eta = self.timing.eta(lambda key: counted.get(key, (None,))[0], eval_wall, tuple(jobs_by_state.values()))
        return Snapshot(self.sweep.name, lines, jobs_by_state, gpu_hours, problems, self._notes, self._now,
                        self.planned_gpu_hours, design, hours, self.planned_hours, self.planned_bounded, eta)


def _urgency(state: str) -> int:
    """Which of a run's eval jobs' states the run shows: a failure first, then one running, queued, pending."""
    return {"failed": 4, "running": 3, "queued": 2, "pending": 1}.get(state, 0)

