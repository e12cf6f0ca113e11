"""What each job of a sweep still takes, and what it waits for: the tasks the sweep's ETA replays (watch/eta.py).

The rates come from what the jobs measured: this sweep's live files (each training job's seconds per step, its
update seconds and backward passes), its finished evaluations' runs rows (wall-clock per job), and the finished jobs
anywhere in the store (plan.store_measurements, one query, asked again at most every STORE_EVERY_S).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from statistics import mean
from typing import Callable

from workflow.stages import stage_of
from workflow.sweep.executor import Executor
from workflow.sweep.plan import PASSES, Measured, asked_gpus, cost_key, scaled_seconds, store_measurements
from workflow.watch.eta import Eta, Task, estimate
from workflow.watch.jobs import JobView

STORE_EVERY_S = 120.0  # how often the store's finished jobs are asked again (a query over every sweep's rows)
# how often the schedule is replayed while no job changes state (a figure in minutes needs no replay per 5 s
# refresh: at 10,000 runs a replay costs about a third of a refresh); in between, the last one counts down
ETA_EVERY_S = 15.0
_SUPERVISED = ("pretrain", "sft")


class Timing:
    """The ETA of one sweep, refreshed per snapshot from the job views the Watcher made."""

    def __init__(self, sweep, root: Path, executor: Executor, clock: Callable[[], float] = time.time):
        self.sweep, self.root, self.executor, self.clock = sweep, Path(root), executor, clock
        self._known = -1  # the runs the shapes were made for (a study or design adds runs)
        self._store: list[tuple[tuple, Measured]] = []
        self._store_at = -float("inf")
        self._last: tuple[float, tuple, Eta] | None = None  # (when, the job states it was replayed for, the ETA)

    # ------------------------------------------------------------------------------------------ shapes, once
    def _shapes(self) -> None:
        """Each job's shape (cost key without the GPUs: plan.cost_key), made once per set of runs."""
        if self._known == len(self.sweep.runs):
            return
        sweep, self._known, self.shape = self.sweep, len(self.sweep.runs), {}
        # one key per stage and setting: a setting's seeds are replicates, whose stage configs differ in the seed and
        # the ids alone, which no cost key reads (at 10,000 runs a key per job was a third of a first refresh)
        by_setting: dict[tuple[str, str], tuple] = {}
        for stage in ("data", "overlap", "pretrain", "sft", "rl"):
            gpus = asked_gpus(sweep, stage)
            for stage_id, runs in sweep.jobs(stage).items():
                setting = (stage, runs[0].label)
                if setting not in by_setting:
                    key = cost_key("data" if stage == "overlap" else stage, runs[0].stage_config(stage), gpus)
                    by_setting[setting] = (key[0], key[1], key[3])
                self.shape[(stage, stage_id)] = by_setting[setting]
        gpus = asked_gpus(sweep, "eval")
        for r in sweep.runs:
            for _, group in r.eval_jobs:
                setting = ("eval", r.label, group)
                if setting not in by_setting:
                    key = cost_key("eval", r.stage_config("eval"), gpus, group)
                    by_setting[setting] = (key[0], key[1], key[3])
                self.shape[("eval", r.eval_id, group)] = by_setting[setting]
        # what the DAG's shape says and no refresh changes: each first evaluation a copy; each RL run's segment ends
        # when a replay first asks (those of runs done are never asked)
        self.copies = sweep.start_sources()
        self._ends: dict[str, list[int]] = {}

    def ends(self, run_id: str) -> list[int]:
        """The RL run's segment ends (Sweep.segment_ends), made once."""
        found = self._ends.get(run_id)
        if found is None:
            found = self._ends[run_id] = self.sweep.segment_ends("rl", run_id)
        return found

    def _measured(self) -> dict[tuple, list[Measured]]:
        now = self.clock()
        if now - self._store_at >= STORE_EVERY_S:
            # (this sweep's own jobs left out by name: the Watcher reads their live files and rows itself, and at
            # 10,000 runs opening their files again was ~9 s of a first refresh)
            self._store_at, self._store = now, store_measurements(
                self.root, set(), excluding={(m.stage, m.stage_id) for m in self.sweep.members()})
        out: dict[tuple, list[Measured]] = {}
        for key, m in self._store:
            out.setdefault((key[0], key[1], key[3]), []).append(m)
        return out

    # --------------------------------------------------------------------------------------------- the ETA
    def eta(self, view_of: Callable[[tuple], JobView | None], eval_wall: dict[tuple, float],
            states: tuple = ()) -> Eta:
        """The sweep's time left. `view_of(key)`: a job's view this refresh (None: not looked at, pending);
        `eval_wall`: finished eval jobs' wall-clock seconds by (eval id, run id, step, group); `states`: the jobs'
        counts by state, whose change replays the schedule at once (else at most every ETA_EVERY_S)."""
        now = self.clock()
        if self._last is not None and self._last[1] == states and now - self._last[0] < ETA_EVERY_S:
            at, _, last = self._last
            return dataclasses.replace(last, seconds=max(last.seconds - (now - at), 0.0))
        found = self._replay(view_of, eval_wall)
        self._last = (now, states, found)
        return found

    def _replay(self, view_of: Callable[[tuple], JobView | None], eval_wall: dict[tuple, float]) -> Eta:
        self._shapes()
        sweep, ex = self.sweep, self.executor
        held: list[dict[tuple, list[Measured]]] = []

        def store() -> dict[tuple, list[Measured]]:
            """The store's measurements, asked only when a shape has none of this sweep's own (a query over every
            runs file: at 10,000 runs most of a first refresh)."""
            if not held:
                held.append(self._measured())
            return held[0]
        live: dict[tuple, list[Measured]] = {}  # this sweep's own rates by shape, from its jobs' live files
        views: dict[tuple, JobView | None] = {}
        for stage in ("pretrain", "sft", "rl"):
            for stage_id in sweep.jobs(stage):
                v = views[(stage, stage_id)] = view_of((stage, stage_id, None, None, None))
                lv = v.live if v is not None else None
                if lv and lv.get("s_per_step"):
                    m = lv.get("metrics") or {}
                    shape = self.shape[(stage, stage_id)]
                    live.setdefault(shape, []).append(Measured(
                        lv["s_per_step"], None, (stage, stage_id), sweep.name, m.get("update_s"),
                        m.get("backward_passes"), shape[2][PASSES] if stage == "rl" else None))
        evals: dict[tuple, list[float]] = {}
        for (eval_id, _run, _step, group), wall in eval_wall.items():
            shape = self.shape.get(("eval", eval_id, group))
            if shape is not None:
                evals.setdefault(shape, []).append(wall)

        rates: dict[tuple, tuple[float | None, str]] = {}  # (one answer per shape: thousands of jobs share a few)

        def per_unit(stage: str, shape: tuple) -> tuple[float | None, str]:
            """Seconds per step (training) or per job, and its basis."""
            if (stage, shape) not in rates:
                rates[(stage, shape)] = _per_unit(stage, shape)
            return rates[(stage, shape)]

        def _per_unit(stage: str, shape: tuple) -> tuple[float | None, str]:
            found = [m.seconds for m in live.get(shape, [])] if stage != "eval" else evals.get(shape, [])
            found = found or [m.seconds for m in store().get(shape, []) if m.seconds is not None]
            if not found and stage == "rl":  # the same but for the update rule's passes: scaled from those
                rest = shape[2][:PASSES] + shape[2][PASSES + 1:]
                found = [s for src in (live, store()) for k, ms in src.items() if k[:2] == shape[:2] and
                         k[2][:PASSES] + k[2][PASSES + 1:] == rest for m in ms
                         if (s := scaled_seconds(m, shape[2][PASSES])) is not None]
            return (mean(found), "measured") if found else (None, "none")

        def timed(stage: str, shape: tuple, units: float, running: JobView | None = None) -> tuple[float | None, str]:
            lv = running.live if running is not None else None
            if lv and lv.get("s_per_step") and stage != "eval":
                return units * lv["s_per_step"], "live"
            rate, basis = per_unit(stage, shape)
            if rate is not None:
                return units * rate, basis
            if not ex.local:  # SLURM ends a job at its time limit: an upper bound
                return getattr(sweep.spec.resources, stage_of(stage).resources_key).time_minutes * 60.0, "limit"
            return None, "none"

        tasks: list[Task] = []
        index: dict[tuple, int] = {}

        def slots(stage: str) -> int:
            return ex.slots_of(getattr(sweep.spec.resources, stage_of(stage).resources_key).threads)

        def add(key: tuple, seconds: float | None, basis: str, after: list[int | None], stage: str,
                running: bool) -> None:
            index[key] = len(tasks)
            tasks.append(Task(seconds, basis, tuple(a for a in after if a is not None), slots(stage) if stage else 0,
                              running))

        def done(v: JobView | None) -> bool:
            return v is not None and v.state == "done"

        for stage in ("data", "overlap"):
            for stage_id in sweep.jobs(stage):
                v = view_of((stage, stage_id, None, None, None))
                if not done(v):
                    add((stage, stage_id), *timed("data", self.shape[(stage, stage_id)], 1, None), [
                        index.get(("data", sweep.jobs(stage)[stage_id][0].data_id)) if stage == "overlap" else None],
                        "data", v is not None and v.state == "running")
        for stage in _SUPERVISED:
            for stage_id, runs in sweep.jobs(stage).items():
                v = views[(stage, stage_id)]
                if done(v):
                    continue
                total = getattr(runs[0].config, stage).steps
                left = total - ((v.live or {}).get("step", 0) if v is not None and v.live else 0)
                r = runs[0]
                up = ([index.get(("data", r.data_id)), index.get(("overlap", r.overlap_id))] if stage == "sft" else [])
                up.append(index.get(("pretrain", r.pretrain_id)) if stage == "sft" else None)
                add((stage, stage_id), *timed(stage, self.shape[(stage, stage_id)], left, v), up, stage,
                    v is not None and v.state == "running")
        for stage_id, runs in sweep.jobs("rl").items():
            v = views[("rl", stage_id)]
            if done(v):
                continue
            r = runs[0]
            at = (v.live or {}).get("step", 0) if v is not None and v.live else 0
            before = index.get(("sft", r.sft_id)) if r.sft_id else index.get(("pretrain", r.pretrain_id))
            start = at
            for i, end in enumerate(e for e in self.ends(stage_id) if e > at):
                running = i == 0 and v is not None and v.state == "running"
                add(("rl", stage_id, end), *timed("rl", self.shape[("rl", stage_id)], end - start,
                                                 v if running else None), [before], "rl", running)
                before, start = index[("rl", stage_id, end)], end
        copies = self.copies
        for r in sweep.runs:
            for step, group in r.eval_jobs:
                key = ("eval", r.eval_id, r.run_id, step, group)
                v = view_of(key)
                if done(v) or key in index:
                    continue
                if step == 0:
                    source = copies.get(r.eval_id)
                    if source is not None:  # a copy of the first run's: no slot, no time to speak of
                        add(key, 0.0, "measured", [index.get(("eval", source.eval_id, source.run_id, 0, group))], "",
                            False)
                        continue
                    up = index.get(("sft", r.sft_id)) if r.sft_id else index.get(("pretrain", r.pretrain_id))
                else:
                    ends = self.ends(r.run_id)
                    up = index.get(("rl", r.run_id, next((e for e in ends if e >= step), ends[-1] if ends else step)))
                add(key, *timed("eval", self.shape[("eval", r.eval_id, group)], 1), [up], "eval",
                    v is not None and v.state == "running")
        return estimate(tasks, ex.slots, guessed=ex.recorded_at is None)
