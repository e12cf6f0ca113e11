"""A tracker run and what it holds.

One tracker run per training stage job: an RL run (all its segments, requeues and resumes), an SFT job, a pretraining
job. Its id is the job's content id (`<stage>-<id>`), so whichever process logs to it (the job, a resumed job, the
next segment's, an evaluation job, `rlsweep track`) finds the same run. An extension is a run of its own (a new id)
that holds the steps it took from its donor: they are its own `train_steps` rows.

Points: a `train_steps` row becomes `train/<column>` at its step (every number but the row's keys); an evaluation
becomes `eval/<benchmark>/avg_at_<k>` (mean accuracy over the k samples) and `eval/<benchmark>/pass_at_<k>` at the RL
step it evaluated (no `@`: MLflow refuses it in a metric's name); another grader's verdicts (`rlsweep rescore`)
`eval/<benchmark>/<grader>/avg`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

ROW_KEYS = {"run_id", "sweep", "stage", "step"}  # a train_steps row's identity columns: no metric


@dataclass(frozen=True)
class Point:
    key: str
    step: int
    value: float


@dataclass(frozen=True)
class TrackedRun:
    stage: str  # pretrain | sft | rl
    stage_id: str
    label: str  # an RL run's setting (its label); for an SFT or pretraining job, which settings share, unused
    seed: int | None
    config: dict[str, Any] = field(default_factory=dict, compare=False)  # the stage's settings, flattened
    tags: tuple[str, ...] = ()  # the sweeps that include it, the method

    def as_dict(self) -> dict[str, Any]:
        """What crosses into another process (verl's trainer) as JSON."""
        return {"stage": self.stage, "stage_id": self.stage_id, "label": self.label, "seed": self.seed,
                "config": self.config, "tags": list(self.tags)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrackedRun":
        return cls(d["stage"], d["stage_id"], d["label"], d.get("seed"), dict(d.get("config") or {}),
                   tuple(d.get("tags") or ()))

    @property
    def key(self) -> str:
        """The tracker run's id: the stage job's content id (W&B's run id, MLflow's rlsweep_id tag, TB's folder)."""
        return f"rlsweep-{self.stage}-{self.stage_id}"

    @property
    def name(self) -> str:
        """An RL run by its setting and seed (an evaluation job, which may open the run first, knows no seed: the
        training job names it again); an SFT or pretraining job (shared by settings) by its stage."""
        if self.stage != "rl":
            return f"{self.stage} {self.stage_id}"
        return f"{self.label}{'' if self.seed is None else f' seed {self.seed}'} ({self.stage_id})"

    @property
    def group(self) -> str:
        """The runs a tracker groups together: an RL run's setting (its seeds), else the stage."""
        return self.label if self.stage == "rl" else self.stage

    @property
    def folder(self) -> str:
        """A file-system-safe name from what every process that logs to the run knows (TensorBoard's run folder)."""
        return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", f"{self.group} {self.stage_id}").strip("_")


def train_points(rows: Iterable[dict[str, Any]]) -> list[Point]:
    """`train/<column>` points of train_steps rows: every finite number of the row (booleans as 0/1)."""
    out = []
    for row in rows:
        step = int(row["step"])
        for k, v in row.items():
            if k in ROW_KEYS or v is None or isinstance(v, str):
                continue
            value = float(v)
            if math.isfinite(value):
                out.append(Point(f"train/{k}", step, value))
    return out


def eval_points(rows: Iterable[dict[str, Any]]) -> list[Point]:
    """Points of eval_scores rows (one per benchmark, step and k): avg@k from the k=1 row (the mean over every
    sample), pass@k from each benchmark's largest k."""
    rows = list(rows)
    largest = {}
    for r in rows:
        key = (r["benchmark"], r["step"])
        largest[key] = max(largest.get(key, 0), int(r["k"]))
    out = []
    for r in rows:
        bench, step, k = r["benchmark"], int(r["step"]), int(r["k"])
        if k == 1 and r.get("avg_at_k") is not None:
            out.append(Point(f"eval/{bench}/avg_at_{largest[bench, step]}", step, float(r["avg_at_k"])))
        if k == largest[bench, step] and r.get("pass_at_k") is not None:
            out.append(Point(f"eval/{bench}/pass_at_{k}", step, float(r["pass_at_k"])))
    return out


def grade_points(rows: Iterable[dict[str, Any]]) -> list[Point]:
    """`eval/<benchmark>/<grader>/avg` points: another grader's accuracy over a step's stored responses (`rlsweep
    rescore`; rows of run_id, step, benchmark, grader, accuracy)."""
    return [Point(f"eval/{r['benchmark']}/{r['grader']}/avg", int(r["step"]), float(r["accuracy"])) for r in rows
            if r.get("accuracy") is not None]


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys (what a tracker's config or params shows)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def tracked_run(stage: str, stage_id: str, cfg: dict[str, Any], *, label: str | None, seed: int | None,
                sweep: str, method: str | None = None) -> TrackedRun:
    """The tracker run of a stage job as the job knows it (its config, its runs row's label, seed and method)."""
    tags = tuple(t for t in (sweep, method if stage == "rl" else None) if t)
    return TrackedRun(stage, stage_id, label or stage, seed, flatten(cfg), tags)
