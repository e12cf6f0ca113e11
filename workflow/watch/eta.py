"""When the whole sweep will be done: `rlsweep watch`'s header and `rlsweep status`.

Every job not done is a task with a duration and the tasks it waits for (the DAG's order: data -> SFT -> RL
segment 1 -> segment 2 ..., an evaluation after the segment holding its step, a copied step-0 evaluation after the
one it copies). The schedule is replayed as Snakemake's greedy scheduler runs it: in the sweep's order, a job
starts once what it waits for is done and its slots are free (the executor's parallelism, recorded when the sweep
started: cores over each job's threads here, SLURM jobs in flight on a cluster: workflow/sweep/executor.py). The
time left is when the last one ends.

A job's duration, best first:
- running: its steps left at its own live rate (LIVE.json);
- measured: its shape's seconds per step (per job for data and eval): this sweep's jobs of that shape (their live
  files, an evaluation's runs row), else finished jobs anywhere in the store (workflow/sweep/plan.py), else for RL
  a shape that differs in the update rule's passes alone, scaled (plan.scaled_seconds);
- at most: on SLURM, the stage's time limit, which SLURM enforces;
- no basis: here, nothing enforces a time limit, so a job of a shape nothing has measured has none.
The figure says which: "at most" when a time limit is in it, "more than" when jobs without a basis are left out.
"""

from __future__ import annotations

import datetime as dt
import heapq
from dataclasses import dataclass


@dataclass
class Task:
    seconds: float | None  # None: no basis (counted as 0, and said)
    basis: str  # "live" | "measured" | "limit" | "none"
    after: tuple[int, ...]  # the tasks it waits for (indices, earlier in the list)
    slots: int  # what it takes of the executor's parallelism (0: runs beside everything, a copy)
    running: bool = False  # started: holds its slots from now


def makespan(tasks: list[Task], capacity: int) -> float:
    """Seconds until the last task ends when each starts, in list order, as soon as what it waits for has ended and
    its slots are free (running tasks hold theirs from the start, even beyond the capacity)."""
    waits = [0] * len(tasks)
    then: list[list[int]] = [[] for _ in tasks]
    for i, t in enumerate(tasks):
        for j in t.after:
            waits[i] += 1
            then[j].append(i)
    ends: list[tuple[float, int]] = []
    free, now = capacity, 0.0
    ready = [i for i, t in enumerate(tasks) if not waits[i] and not t.running]
    heapq.heapify(ready)
    for i, t in enumerate(tasks):
        if t.running:
            free -= t.slots
            heapq.heappush(ends, (t.seconds or 0.0, i))
    while ready or ends:
        while ready and (min(tasks[ready[0]].slots, capacity) <= free or not ends):
            i = heapq.heappop(ready)
            free -= min(tasks[i].slots, capacity)
            heapq.heappush(ends, (now + (tasks[i].seconds or 0.0), i))
        if not ends:
            break
        now, i = heapq.heappop(ends)
        free += min(tasks[i].slots, capacity) if not tasks[i].running else tasks[i].slots
        for k in then[i]:
            waits[k] -= 1
            if not waits[k]:
                heapq.heappush(ready, k)
    return now


@dataclass(frozen=True)
class Eta:
    seconds: float  # time left for the jobs with a basis
    jobs: int  # jobs left
    bounded: int  # of them, timed by their time limit (SLURM)
    unbased: int  # of them, with no basis at all (left out of `seconds`)
    guessed: bool = False  # the executor's parallelism was not recorded (a guess: executor.executor_of)

    def text(self, now: float) -> str:
        if not self.jobs:
            return "ETA: nothing left"
        guess = "; parallelism a guess: not recorded at the sweep's start" if self.guessed else ""
        if self.unbased == self.jobs:
            return f"ETA: no basis yet ({self.jobs} jobs, none of a shape measured{guess})"
        when = dt.datetime.fromtimestamp(now + self.seconds).strftime("%H:%M")
        if self.unbased:
            return (f"ETA more than {duration(self.seconds)}: no basis for {self.unbased} of {self.jobs} jobs "
                    f"(nothing of their shape measured{guess})")
        if self.bounded:
            return (f"ETA at most {duration(self.seconds)} (by {when}; {self.bounded} of {self.jobs} jobs from time "
                    f"limits{guess})")
        return f"ETA {duration(self.seconds)} (at {when}{guess})"


def estimate(tasks: list[Task], capacity: int, guessed: bool = False) -> Eta:
    return Eta(makespan(tasks, capacity), len(tasks), sum(t.basis == "limit" for t in tasks),
               sum(t.basis == "none" for t in tasks), guessed)


def duration(s: float) -> str:
    """Seconds as a person says them: 45s, 12m, 3h05m, 2d04h."""
    s = max(0, int(round(s)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
