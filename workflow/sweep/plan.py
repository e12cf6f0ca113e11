"""`rlsweep plan`: what running a sweep would do, before it spends an allocation. Per stage, its jobs by state
(done: DONE.json; partial: a checkpoint to resume from; failed: the runs table says so; running; new), what each
job to run asks of SLURM (the stage's resources), and an estimate of the GPU-hours still to spend:

- measured: the wall-clock per step (SFT / RL) or per job (data, eval) of this sweep's finished jobs of the same
  stage, engine, model and GPUs, times the steps (jobs) left, times the job's GPUs; where SLURM's accounting gave
  those jobs' GPU-hours (runs.gpu_hours), their GPU-hours per step (job) instead, which include start-up,
  checkpoints and requeues;
- upper bound: the stage's time limit times its GPUs, for a job with no such finished job to go by;
- nothing for a step-0 eval job that copies another run's evaluation of the same start (Sweep.start_sources).

A job done is done whichever sweep computed it (the store is shared, layout.py): `reused` counts, per stage, the
done jobs another sweep computed.

GPU-hours are GPUs x hours of a job (a CPU-only stage counts 0 GPUs, its hours are shown as such).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from workflow.engines.registry import traits
from workflow.layout import CHECKPOINTS, done_path, latest_checkpoint, stage_dir
from workflow.results.catalog import Catalog, QueryError
from workflow.stages import stage_of

STATES = ("done", "partial", "failed", "running", "new")
STAGES = ("data", "pretrain", "sft", "rl", "eval")
_TRAINING = ("pretrain", "sft", "rl")  # jobs that train a number of steps (their cost is per step)


@dataclass
class Job:
    stage: str
    stage_id: str
    state: str
    steps_left: int | None  # SFT / RL: steps still to train (None for data / eval jobs)
    cost_key: tuple  # what makes two jobs cost the same: stage, engine, model, GPUs
    copy: bool = False  # a step-0 eval job copying another run's rows (no GPU, no time to speak of)


@dataclass
class StagePlan:
    stage: str
    counts: dict[str, int] = field(default_factory=lambda: {s: 0 for s in STATES})
    asks: str = ""  # what each job to run asks of SLURM
    hours: float = 0.0  # wall-clock hours left (jobs to run)
    gpu_hours: float = 0.0
    measured: int = 0  # jobs to run whose estimate comes from finished jobs
    bounded: int = 0  # ... and whose estimate is the time limit (an upper bound)
    reused: dict[str, int] = field(default_factory=dict)  # done jobs another sweep computed: per that sweep


def _recorded(catalog: Catalog) -> tuple[dict[tuple[str, str], str], dict[str, float], dict[tuple[str, str], float],
                                         dict[tuple[str, str], float], dict[tuple[str, str], str]]:
    """From the tables: each job's last recorded status, each finished SFT / RL job's mean wall-clock per step, each
    finished data / eval job's wall-clock (by stage and id; an eval job by id, step and group), and each finished
    job's GPU-hours as SLURM accounted them (an SFT / RL job's per step), where sacct had them, and the sweep that
    computed each job (the shared store: another sweep's, for a job this sweep reuses)."""
    try:
        # (eval_step / eval_group exist once an eval job has written its row: COLUMNS picks what exists)
        status = catalog.query("SELECT COLUMNS('^(stage|run_id|eval_step|eval_group|status|wall_s|gpu_hours|"
                               "computed_by)$') FROM runs").to_pylist()
        per_step = catalog.query("SELECT run_id, avg(wall_s) AS s, count(DISTINCT step) AS n FROM train_steps "
                                 "GROUP BY ALL").to_pylist()
    except QueryError:  # nothing has run yet
        return {}, {}, {}, {}, {}
    steps = {r["run_id"]: r["n"] for r in per_step}
    states, wall, gpu, computed_by = {}, {}, {}, {}
    for r in status:
        job = r["run_id"] if r["stage"] != "eval" else f"{r['run_id']}/{r.get('eval_step')}/{r.get('eval_group')}"
        states[(r["stage"], job)] = r["status"]
        computed_by[(r["stage"], job)] = r["computed_by"]
        if r["status"] == "completed" and r["wall_s"] is not None:
            wall[(r["stage"], job)] = r["wall_s"]
        if r["status"] == "completed" and r.get("gpu_hours") is not None:
            n = steps.get(r["run_id"]) if r["stage"] in _TRAINING else 1
            if n:
                gpu[(r["stage"], job)] = r["gpu_hours"] / n
    return states, {r["run_id"]: r["s"] for r in per_step if r["s"] is not None}, wall, gpu, computed_by


def _state(done: Path, checkpoints: Path | None, recorded: str | None) -> str:
    """A job's state: its DONE.json, else what the runs table last recorded for it (failed, running), else a
    checkpoint to resume from (an interrupted or preempted job resumes too), else new."""
    if done.is_file():
        return "done"
    if recorded in ("failed", "running"):
        return recorded
    if checkpoints is not None and latest_checkpoint(checkpoints):
        return "partial"
    return "new"


def _model_key(cfg: dict) -> str:
    name = cfg.get("engine", {}).get("name")
    return json.dumps([name, traits(name).model_key(cfg) if name else None], sort_keys=True)


def sweep_jobs(sweep, root: Path, states: dict) -> list[Job]:
    """Every job of the sweep with its state (eval jobs of an RL run that is not done count as new)."""
    res = sweep.spec.resources
    jobs: list[Job] = []

    def gpus(stage: str) -> int:
        r = getattr(res, stage_of(stage).resources_key)
        return r.gpus_per_node * r.nodes

    for stage in ("data", "overlap"):
        for data_id, cfg in sweep.configs(stage).items():
            state = _state(done_path(root, stage, data_id), None, states.get((stage, data_id)))
            jobs.append(Job("data", data_id, state, None, ("data", _model_key(cfg), gpus("data"))))
    for stage in _TRAINING:
        for stage_id, cfg in sweep.configs(stage).items():
            out = stage_dir(root, stage, stage_id)
            state = _state(out / "DONE.json", out / CHECKPOINTS, states.get((stage, stage_id)))
            total = cfg[stage]["steps"]
            found = latest_checkpoint(out / CHECKPOINTS)
            left = 0 if state == "done" else total - (found[0] if found else 0)
            jobs.append(Job(stage, stage_id, state, left, (stage, _model_key(cfg), gpus(stage))))
    copies = sweep.start_sources()
    for r in sweep.runs:
        for step, group in r.eval_jobs:
            job = f"{r.eval_id}/{step}/{group}"
            state = _state(done_path(root, "eval", r.eval_id, r.run_id, step, group), None,
                           states.get(("eval", job)))
            copy = step == 0 and r.eval_id in copies
            jobs.append(Job("eval", job, state, None, ("eval", _model_key(r.stage_config("eval")), gpus("eval"))
                            + (("copy",) if copy else ()), copy))
    return jobs


def plan(sweep, root: Path) -> list[StagePlan]:
    """Per stage (data and overlap checks together as `data`): jobs by state, the SLURM ask, the hours left."""
    catalog = Catalog(root, sweep.name, planned=sweep.members())
    states, per_step, wall, accounted, computed_by = _recorded(catalog)
    jobs = sweep_jobs(sweep, root, states)
    # measured cost per cost key, over finished jobs: seconds per step (SFT / RL) or per job (data / eval), and the
    # GPU-hours SLURM accounted per step or job (startup, evaluation overheads and requeues included)
    samples: dict[tuple, list[float]] = {}
    gpu_samples: dict[tuple, list[float]] = {}
    for job in jobs:
        if job.state != "done":
            continue
        seconds = per_step.get(job.stage_id) if job.stage in _TRAINING else wall.get((job.stage, job.stage_id))
        if seconds is not None:
            samples.setdefault(job.cost_key, []).append(seconds)
        if (job.stage, job.stage_id) in accounted:
            gpu_samples.setdefault(job.cost_key, []).append(accounted[(job.stage, job.stage_id)])
    out = {s: StagePlan(s) for s in STAGES}
    for job in jobs:
        p = out[job.stage]
        p.counts[job.state] += 1
        by = computed_by.get((job.stage, job.stage_id))
        if job.state == "done" and by not in (None, sweep.name):
            p.reused[by] = p.reused.get(by, 0) + 1
        if job.state == "done" or job.copy:
            continue
        res = getattr(sweep.spec.resources, stage_of(job.stage).resources_key)
        measured, billed = samples.get(job.cost_key), gpu_samples.get(job.cost_key)
        units = job.steps_left if job.steps_left is not None else 1
        if measured:
            hours = sum(measured) / len(measured) * units / 3600
            p.measured += 1
        else:
            hours = res.time_minutes / 60
            p.bounded += 1
        p.hours += hours
        p.gpu_hours += sum(billed) / len(billed) * units if measured and billed else hours * job.cost_key[2]
    for stage, p in out.items():
        r = getattr(sweep.spec.resources, stage_of(stage).resources_key)
        p.asks = (f"{r.nodes} node x {r.gpus_per_node} GPU, {r.cpus_per_task or r.threads} CPUs, {r.time}"
                  + (f", {r.mem}" if r.mem else "") + (f", {r.partition}" if r.partition else ""))
    return [p for p in out.values() if sum(p.counts.values())]
