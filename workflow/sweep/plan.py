"""`rlsweep plan`: what running a sweep would do, before it spends an allocation. Per stage, its jobs by state
(done: DONE.json; partial: a checkpoint to resume from; failed: the runs table says so; running; new), what each
job to run asks of SLURM (the stage's resources), and an estimate of the GPU-hours still to spend:

- measured: the mean wall-clock per step (SFT / RL) or per job (data, eval) of the finished jobs of the same cost
  key anywhere in the store (any sweep's: the store is shared), times the steps (jobs) left, times the job's GPUs;
  where SLURM's accounting gave those jobs' GPU-hours (runs.gpu_hours), their GPU-hours per step (job) instead, which
  include start-up, checkpoints and requeues. An optimistic figure: it leaves out queueing;
- measured, scaled: an RL job with no finished job of its shape, but some that differ from it only in the update
  rule's backward passes per step (SFPO at another K), from theirs: the update part of a step scaled by the passes
  (scaled_seconds; bench/plan_estimate.py checks it against a run);
- upper bound: the stage's time limit times its GPUs, for a job with no such finished job to go by;
- nothing for a step-0 eval job that copies another run's evaluation of the same start (Sweep.start_sources), and
  nothing for the steps an RL run takes from a finished shorter run (workflow/extend.py).

The cost key: the stage, the engine and model, the GPUs the job asks, and what multiplies a step's cost (cost_shape):
RL's update rule and its inner passes (K), its mixed-policy method, its rollout shape (prompts x group x longest
response) and a reference model's forward (KL); SFT's and pretraining's batch; an eval job's benchmarks, samples per
problem, problems and longest response. A finished job of another sweep is known by its runs row: its config, and
its GPUs where SLURM accounted them (off SLURM they are not recorded: such a job matches on the rest of the key).

A job done is done whichever sweep computed it (the store is shared, layout.py): `reused` counts, per stage, the
done jobs another sweep computed.

GPU-hours are GPUs x hours of a job (a CPU-only stage counts 0 GPUs, its hours are shown as such).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path

from workflow.atomic import write_json
from workflow.engine_api.registry import traits
from workflow.extend import evaluations_to_copy, extensions
from workflow.layout import CHECKPOINTS, done_path, latest_checkpoint, stage_dir, sweep_dir
from workflow.methods.registry import METHODS
from workflow.results.catalog import Catalog, QueryError
from workflow.stages import STAGES as DECLARED, stage_of
from workflow.sweep.executor import Executor, executor_of, gpus_used

STATES = ("done", "partial", "failed", "running", "new")
STAGES = ("data", "pretrain", "sft", "rl", "eval")
_TRAINING = ("pretrain", "sft", "rl")  # jobs that train a number of steps (their cost is per step)


@dataclass
class Job:
    stage: str
    stage_id: str
    state: str
    steps_left: int | None  # SFT / RL: steps still to train (None for data / eval jobs)
    cost_key: tuple  # what makes two jobs cost the same: stage, engine and model, GPUs, cost_shape (module doc)
    copy: bool = False  # a step-0 eval job copying another run's rows (no GPU, no time to speak of)


@dataclass(frozen=True)
class Measured:
    """What one finished job measured: seconds per step (SFT / RL) or per job, SLURM's GPU-hours per step (job)
    where it accounted them; the job (stage, id) and the sweep that computed it. An RL job's mean update seconds
    and backward passes per step, and its rule's nominal passes, let a job of another K be estimated from it."""
    seconds: float | None
    gpu_hours: float | None
    job: tuple[str, str]
    sweep: str | None
    update_s: float | None = None
    passes: float | None = None
    nominal: int | None = None


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
    # the finished jobs the measured estimates came from, per the sweep that computed them
    sources: dict[str, set] = field(default_factory=dict)
    taken: int = 0  # RL steps taken from finished shorter runs (extensions): no cost
    copies: int = 0  # eval jobs to make that copy another run's evaluation (a shared start, an extension's donor):
    # no cost, and not among `counts` (a copy is not a job to run)
    gpus: int = 0  # the GPUs each job to run will use where the sweep runs (executor.gpus_used: 0 on a CPU machine)


def _recorded(catalog: Catalog) -> tuple[dict[tuple[str, str], str], dict[str, dict], dict[tuple[str, str], float],
                                         dict[tuple[str, str], float], dict[tuple[str, str], str]]:
    """From the tables: each job's last recorded status, each finished SFT / RL job's mean wall-clock per step (s;
    with its mean update seconds u and backward passes p), each
    finished data / eval job's wall-clock (by stage and id; an eval job by id, step and group), and each finished
    job's GPU-hours as SLURM accounted them (an SFT / RL job's per step), where sacct had them, and the sweep that
    computed each job (the shared store: another sweep's, for a job this sweep reuses)."""
    try:
        # (eval_step / eval_group exist once an eval job has written its row: COLUMNS picks what exists)
        status = catalog.query("SELECT COLUMNS('^(stage|run_id|eval_step|eval_group|status|wall_s|gpu_hours|"
                               "computed_by)$') FROM runs").to_pylist()
        per_step = catalog.query("SELECT run_id, avg(wall_s) AS s, avg(update_s) AS u, avg(backward_passes) AS p, "
                                 "count(DISTINCT step) AS n FROM train_steps GROUP BY ALL").to_pylist()
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
    return states, {r["run_id"]: r for r in per_step if r["s"] is not None}, wall, gpu, computed_by


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


def asked_gpus(sweep, stage: str) -> int:
    """The GPUs a job of `stage` asks (its resources: GPUs per node x nodes)."""
    r = getattr(sweep.spec.resources, stage_of(stage).resources_key)
    return r.gpus_per_node * r.nodes


def _model_key(cfg: dict) -> str:
    name = cfg.get("engine", {}).get("name")
    return json.dumps([name, traits(name).model_key(cfg) if name else None], sort_keys=True)


def cost_shape(stage: str, cfg: dict, group: str | None = None) -> tuple:
    """What, beyond the engine, the model and the GPUs, decides what a step (data / eval: a job) of `stage` costs,
    from its stage config: two jobs of one shape cost the same per step. RL: the update rule and its backward passes
    per step (its card's `passes`: SFPO's K + 1, GXPO's 3 whatever its K), the mixed-policy method, the rollout shape
    and whether a reference model runs (KL > 0); SFT and pretraining: the batch; eval: the benchmark group, samples
    per problem, problems and longest response. RL's passes are the shape's second entry (PASSES): a job with no
    finished job of its shape is estimated from jobs that differ in it alone (scaled_seconds)."""
    if stage == "rl":
        rl = cfg.get("rl", {})
        return (rl.get("update"), nominal_passes(rl), rl.get("mix", "none"), rl.get("prompts_per_step"),
                rl.get("group_size"), rl.get("max_new_tokens"), bool(rl.get("kl_coef")))
    if stage in ("sft", "pretrain"):
        return (cfg.get(stage, {}).get("batch_size"),)
    if stage == "eval":
        ev = cfg.get("eval", {})
        return (group, ev.get("k"), ev.get("n_problems"), ev.get("max_new_tokens"))
    return ()


PASSES = 1  # where an RL cost shape holds the rule's backward passes per step


def nominal_passes(rl: dict) -> int:
    """The run's update rule's backward passes per step while its extra passes run (its card's), from the RL config
    as plain JSON; 1 for a rule no registry knows here."""
    name = rl.get("update")
    if name not in METHODS:
        return 1
    return METHODS.get(name).nominal_passes(rl.get(name))


def scaled_seconds(measured: "Measured", passes: int) -> float | None:
    """A measured RL step's seconds at another number of backward passes per step: the update (its measured
    update_s, all passes) scales with the passes the job would take, the rest (generation, scoring) not. The passes
    it would take: the measured run's mean per step, its extra passes (those beyond one) scaled by the ratio of
    nominal extras (a gated rule that ran its extra passes on a share of the steps is assumed to run them on the same
    share). None: what the measured job logged cannot be scaled (no update time or passes)."""
    m = measured
    if m.seconds is None or m.update_s is None or not m.passes or not m.nominal:
        return None
    if m.nominal == 1:  # its share of steps with extra passes cannot be told apart: no scaling from one pass
        return None
    share = max(0.0, (m.passes - 1) / (m.nominal - 1))
    would = 1 + share * (passes - 1)
    return m.seconds + m.update_s * (would / m.passes - 1)


def cost_key(stage: str, cfg: dict, gpus: int | None, group: str | None = None) -> tuple:
    """What makes two jobs cost the same (the module doc): stage, engine and model, GPUs, cost_shape."""
    return (stage, _model_key(cfg), gpus, cost_shape(stage, cfg, group))


def store_measurements(root: Path, skip: set, excluding=()) -> list[tuple[tuple, Measured]]:
    """(cost key, what it measured) of every finished job in the store that `skip` ((stage, job) pairs) does not
    hold, known by its runs rows: their config, and their GPUs where SLURM accounted them (None: not recorded).
    `excluding`: (stage, stage id) pairs whose own files are not even opened (Catalog's)."""
    catalog = Catalog(root, excluding=excluding)  # every sweep's rows: the store is shared
    try:
        rows = catalog.query("SELECT COLUMNS('^(stage|run_id|eval_step|eval_group|wall_s|gpu_hours|slurm_gpus|"
                             "config|computed_by)$') FROM runs WHERE status = 'completed'").to_pylist()
        steps = catalog.query("SELECT stage, run_id, avg(wall_s) AS s, avg(update_s) AS u, avg(backward_passes) AS p, "
                              "count(DISTINCT step) AS n FROM train_steps GROUP BY ALL").to_pylist()
    except QueryError:  # nothing has run anywhere yet
        return []
    per_step = {(r["stage"], r["run_id"]): r for r in steps}
    jobs: dict[tuple, dict] = {}
    for r in rows:  # a job's rows: one per segment job (its GPU-hours add up), the last one's config
        job = (r["stage"], r["run_id"] if r["stage"] != "eval"
               else f"{r['run_id']}/{r.get('eval_step')}/{r.get('eval_group')}")
        if job in skip or not r.get("config"):
            continue
        seen = jobs.setdefault(job, {"gpu_hours": None, **r})
        gpus = r["slurm_gpus"] if r["slurm_gpus"] is not None else seen["slurm_gpus"]  # (0: a CPU job on SLURM)
        seen.update(config=r["config"], slurm_gpus=gpus, wall_s=r["wall_s"])
        if r["gpu_hours"] is not None:
            seen["gpu_hours"] = (seen["gpu_hours"] or 0.0) + r["gpu_hours"]
    out = []
    for (stage, job_id), r in jobs.items():
        try:
            cfg = json.loads(r["config"])
        except ValueError:
            continue
        steps = {}
        if stage in _TRAINING:
            steps = per_step.get((stage, job_id))
            if not steps or steps["s"] is None:
                continue
            seconds, units = steps["s"], steps["n"]
        else:
            seconds, units = r["wall_s"], 1
        gpu_hours = r["gpu_hours"] / units if r["gpu_hours"] is not None and units else None
        key = cost_key(stage if stage != "overlap" else "data", cfg, r["slurm_gpus"], r.get("eval_group"))
        out.append((key, Measured(seconds, gpu_hours, (stage, job_id), r["computed_by"], steps.get("u"), steps.get("p"),
                                  key[3][PASSES] if stage == "rl" else None)))
    return out


def sweep_jobs(sweep, root: Path, states: dict, exts=()) -> list[Job]:
    """Every job of the sweep with its state (eval jobs of an RL run that is not done count as new). An RL run not
    started that extends a finished shorter run (`exts`: workflow/extend.py's Extensions) has only the steps after
    it left, and its evaluations that the finished run has made with the same settings are copies."""
    taken = {e.run.run_id: e.last for e in exts}
    copied = {(e.run.run_id, step, group) for e in exts for step, group, _ in evaluations_to_copy(root, e)}
    jobs: list[Job] = []
    for stage in ("data", "overlap"):
        for data_id, cfg in sweep.configs(stage).items():
            state = _state(done_path(root, stage, data_id), None, states.get((stage, data_id)))
            jobs.append(Job("data", data_id, state, None, cost_key("data", cfg, asked_gpus(sweep, "data"))))
    for stage in _TRAINING:
        for stage_id, cfg in sweep.configs(stage).items():
            out = stage_dir(root, stage, stage_id)
            state = _state(out / "DONE.json", out / CHECKPOINTS, states.get((stage, stage_id)))
            total = cfg[stage]["steps"]
            found = latest_checkpoint(out / CHECKPOINTS)
            start = max(found[0] if found else 0, taken.get(stage_id, 0) if stage == "rl" else 0)
            left = 0 if state == "done" else total - start
            jobs.append(Job(stage, stage_id, state, left, cost_key(stage, cfg, asked_gpus(sweep, stage))))
    copies = sweep.start_sources()
    for r in sweep.runs:
        for step, group in r.eval_jobs:
            job = f"{r.eval_id}/{step}/{group}"
            state = _state(done_path(root, "eval", r.eval_id, r.run_id, step, group), None,
                           states.get(("eval", job)))
            copy = (step == 0 and r.eval_id in copies) or (r.run_id, step, group) in copied
            key = cost_key("eval", r.stage_config("eval"), asked_gpus(sweep, "eval"), group)
            jobs.append(Job("eval", job, state, None, key + (("copy",) if copy else ()), copy))
    return jobs


def plan(sweep, root: Path, executor: Executor | None = None) -> list[StagePlan]:
    """Per stage (data and overlap checks together as `data`): jobs by state, the SLURM ask, the hours left, and the
    GPU-hours where the sweep runs (`executor`: where it last started, else a guess; a CPU machine's: none)."""
    executor = executor or executor_of(root, sweep.name)
    catalog = Catalog(root, sweep.name, planned=sweep.members())
    states, per_step, wall, accounted, computed_by = _recorded(catalog)
    exts = extensions(root, sweep.runs)[0]
    jobs = sweep_jobs(sweep, root, states, exts)
    # measured cost by cost key without the GPUs: (the GPUs, what was measured) of each finished job, this sweep's
    # (known by its config) and the rest of the store's (known by their runs rows)
    samples: dict[tuple, list[tuple[int | None, Measured]]] = {}

    def add(key: tuple, measured: Measured) -> None:
        samples.setdefault((key[0], key[1], key[3]), []).append((key[2], measured))

    mine = set()
    for job in jobs:
        if job.state != "done" or job.copy:
            continue
        mine.add((job.stage, job.stage_id))
        steps = per_step.get(job.stage_id, {}) if job.stage in _TRAINING else {}
        seconds = steps.get("s") if job.stage in _TRAINING else wall.get((job.stage, job.stage_id))
        if seconds is not None or (job.stage, job.stage_id) in accounted:
            add(job.cost_key, Measured(seconds, accounted.get((job.stage, job.stage_id)), (job.stage, job.stage_id),
                                       computed_by.get((job.stage, job.stage_id)) or sweep.name, steps.get("u"),
                                       steps.get("p"), job.cost_key[3][PASSES] if job.stage == "rl" else None))
    for key, measured in store_measurements(root, mine):
        add(key, measured)
    out = {s: StagePlan(s) for s in STAGES}
    for job in jobs:
        p = out[job.stage]
        if job.copy and job.state != "done":
            p.copies += 1
            continue
        p.counts[job.state] += 1
        by = computed_by.get((job.stage, job.stage_id))
        if job.state == "done" and by not in (None, sweep.name):
            p.reused[by] = p.reused.get(by, 0) + 1
        if job.state == "done" or job.copy:
            continue
        res = getattr(sweep.spec.resources, stage_of(job.stage).resources_key)
        gpus = job.cost_key[2]
        found = [m for g, m in samples.get((job.cost_key[0], job.cost_key[1], job.cost_key[3]), [])
                 if g is None or g == gpus]
        seconds = [m.seconds for m in found if m.seconds is not None]
        billed = [m.gpu_hours for m in found if m.gpu_hours is not None]
        if not seconds and job.stage == "rl":  # none of its shape: those that differ in the passes alone, scaled
            passes = job.cost_key[3][PASSES]
            found = [m for (stage, model, shape), ms in samples.items() if (stage, model) == job.cost_key[:2]
                     and shape[:PASSES] + shape[PASSES + 1:] == job.cost_key[3][:PASSES] + job.cost_key[3][PASSES + 1:]
                     for g, m in ms if (g is None or g == gpus) and scaled_seconds(m, passes) is not None]
            seconds = [scaled_seconds(m, passes) for m in found]
            billed = [m.gpu_hours * s / m.seconds for m, s in zip(found, seconds)
                      if m.gpu_hours is not None and m.seconds]
        units = job.steps_left if job.steps_left is not None else 1
        if seconds:
            hours = sum(seconds) / len(seconds) * units / 3600
            p.measured += 1
            for m in found:
                p.sources.setdefault(m.sweep or "?", set()).add(m.job)
        else:
            hours = res.time_minutes / 60
            p.bounded += 1
        p.hours += hours
        p.gpus = gpus_used(gpus, executor)
        p.gpu_hours += sum(billed) / len(billed) * units if seconds and billed else hours * p.gpus
    out["rl"].taken = sum(e.last for e in exts)
    for stage, p in out.items():
        r = getattr(sweep.spec.resources, stage_of(stage).resources_key)
        p.asks = (f"{r.nodes} node x {r.gpus_per_node} GPU, {r.cpus_per_task or r.threads} CPUs, {r.time}"
                  + (f", {r.mem}" if r.mem else "") + (f", {r.partition}" if r.partition else ""))
    return [p for p in out.values() if sum(p.counts.values()) or p.copies]


# ------------------------------------------------------------------------------------------ planned against used
PLAN_FILE = "plan.json"  # results/<sweep>/plan.json: the estimate when the sweep first ran


def record_plan(sweep, root: Path, executor: Executor | None = None) -> bool:
    """The plan's estimate of what the sweep had left to spend when it first ran (results/<sweep>/plan.json), kept
    from then on: what `rlsweep status` sets the GPU-hours it used against, priced on `executor` (the one it started
    under; None: executor_of's). False: already recorded."""
    path = sweep_dir(root, sweep.name) / PLAN_FILE
    if path.is_file():
        return False
    stages = {p.stage: {"hours": p.hours, "gpu_hours": p.gpu_hours, "measured": p.measured, "bounded": p.bounded,
                        "to_run": p.measured + p.bounded} for p in plan(sweep, root, executor)}
    write_json(path, {"recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                      "stages": stages})
    return True


def recorded_plan(root: Path, sweep: str) -> dict | None:
    try:
        return json.loads((sweep_dir(root, sweep) / PLAN_FILE).read_text())
    except (OSError, ValueError):
        return None


@dataclass
class Used:
    stage: str
    method: str | None  # RL: the method; None: the stage's total
    hours: float
    gpu_hours: float
    jobs: int


def used(sweep, catalog: Catalog) -> list[Used]:
    """What the sweep's own jobs (not those it reused from another sweep) spent, per stage and, for RL, per method:
    wall-clock hours, and GPU-hours as SLURM accounted them (each attempt's elapsed x its GPUs, requeues included),
    else wall-clock x the GPUs the job ran on (its runs row's `gpus`: 0 on the CPU; a row from before it was recorded:
    the GPUs the stage asks)."""
    try:
        rows = catalog.query("SELECT COLUMNS('^(stage|method|wall_s|gpu_hours|gpus)$') FROM runs WHERE computed_by = "
                             f"'{sweep.name}' AND wall_s IS NOT NULL").to_pylist()
    except QueryError:
        return []
    out: dict[tuple, Used] = {}
    for r in rows:
        stage = "data" if r["stage"] == "overlap" else r["stage"]
        ran_on = r.get("gpus")
        if ran_on is None:  # (recorded before the runs rows said)
            ran_on = asked_gpus(sweep, r["stage"]) if r["stage"] in DECLARED else 0
        gpu_hours = r["gpu_hours"] if r["gpu_hours"] is not None else r["wall_s"] * ran_on / 3600
        for key in ((stage, None), *(((stage, r["method"]),) if stage == "rl" else ())):
            u = out.setdefault(key, Used(stage, key[1], 0.0, 0.0, 0))
            u.hours, u.gpu_hours, u.jobs = u.hours + r["wall_s"] / 3600, u.gpu_hours + gpu_hours, u.jobs + 1
    return list(out.values())


def off_by(planned: float, spent: float, left: int) -> str | None:
    """Why a stage's use is flagged against its plan: over twice the plan, or (its jobs all done) under half."""
    if planned <= 0:
        return None
    if spent > 2 * planned:
        return f"{spent / planned:.1f}x the plan"
    if left == 0 and spent < planned / 2:
        return f"{spent / planned:.2f}x the plan"
    return None


@dataclass
class CostRow:
    """One line of planned against used: a stage (method None) or one RL method of it."""
    used: Used
    planned: dict | None  # the stage's recorded plan: hours, gpu_hours, measured, bounded (None: a method's line)
    flag: str | None  # why it is off its plan (off_by)
    # the estimate now, once the store has measured the stage's shapes: used + the plan's left (hours, gpu_hours,
    # bounded); None for a method's line, a stage with nothing left, or none of whose jobs to run is measured
    now: dict | None = None


def cost_rows(sweep, root: Path, catalog: Catalog) -> tuple[list[CostRow], str | None]:
    """Per stage (and RL method) what the sweep's own jobs used, beside the plan recorded when the sweep first ran,
    flagged where off by more than 2x (a plan from time limits is an upper bound: under it is no surprise), and the
    estimate now (used + what the plan has left, where the store has measured the stage's shapes); and when the plan
    was recorded (None: never). No rows: nothing used and nothing planned."""
    spent, recorded = used(sweep, catalog), recorded_plan(root, sweep.name)
    if not spent and recorded is None:
        return [], None
    stages = (recorded or {}).get("stages", {})
    left = {p.stage: p for p in plan(sweep, root)}
    shown = {(u.stage, u.method): u for u in spent}
    for stage in stages:  # a planned stage nothing has run of yet: its plan, and nothing used
        shown.setdefault((stage, None), Used(stage, None, 0.0, 0.0, 0))
    rows = []
    for (stage, method), u in sorted(shown.items(), key=lambda kv: (STAGES.index(kv[0][0]) if kv[0][0] in STAGES
                                                                    else len(STAGES), kv[0][1] or "")):
        p = stages.get(stage) if method is None else None
        now = left.get(stage) if method is None else None
        to_run = 0 if now is None else sum(now.counts.values()) - now.counts["done"]
        flag = None
        if p is not None and not (p["bounded"] and u.gpu_hours < p["gpu_hours"]):
            on_gpus = p["gpu_hours"] > 0
            flag = off_by(p["gpu_hours"] if on_gpus else p["hours"], u.gpu_hours if on_gpus else u.hours, to_run)
        estimate = ({"hours": u.hours + now.hours, "gpu_hours": u.gpu_hours + now.gpu_hours,
                     "bounded": now.bounded} if now is not None and to_run and now.measured else None)
        rows.append(CostRow(u, p, flag, estimate))
    return rows, (recorded or {}).get("recorded_at")


def hours_text(h: float) -> str:
    """Hours short but not rounded away: 0, 0.0011, 0.52, 12.3, 1.2e+03."""
    return "0" if h == 0 else f"{h:.2g}" if h < 0.1 else f"{h:.3g}"


def at_most(h: float, bounded: bool) -> str:
    """A figure, with "at most" where any of it comes from time limits (an upper bound, not an estimate)."""
    return ("at most " if bounded and h else "") + hours_text(h)


def on_gpus(rows: list[CostRow]) -> bool:
    """Whether the sweep's figures are GPU-hours: a job ran on a GPU, or the plan has jobs use one. A sweep on the
    CPU counts plain hours (never GPU-hours of the GPUs its `resources:` would ask of SLURM)."""
    return any(r.used.gpu_hours > 0 or (r.planned or {}).get("gpu_hours", 0) > 0
               or (r.now or {}).get("gpu_hours", 0) > 0 for r in rows)


def cost_columns(gpus: bool) -> tuple[str, ...]:
    """The columns of planned against used (`rlsweep status`, the report's Cost section): the last is the flag."""
    unit = "GPU-hours" if gpus else "hours"
    return ("stage", "method", "jobs", "hours", *(("GPU-hours",) if gpus else ()), f"planned {unit}",
            f"estimate now ({unit})", "")


def cost_cells(row: CostRow, gpus: bool) -> list[str]:
    """A CostRow's cells under cost_columns(gpus)."""
    u, p, now = row.used, row.planned, row.now
    key = "gpu_hours" if gpus else "hours"
    return [u.stage, u.method or "all", str(u.jobs), hours_text(u.hours),
            *((hours_text(u.gpu_hours),) if gpus else ()),
            "" if p is None else at_most(p[key], bool(p["bounded"])),
            "" if now is None else at_most(now[key], bool(now["bounded"])),
            row.flag or ""]
