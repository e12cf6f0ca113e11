"""Run one stage of one run in this process: the entry point every Snakemake rule calls (scripts/stage.py).

    stage.py STAGE --sweep S --id STAGE_ID --config JSON [the stage's options]
    stage.py aggregate --sweep S [--out SUMMARY]

Each stage's options are declared with the stage (workflow/stages.py STAGES; `stage.py STAGE --help` lists them):
the files of the stages it reads (an RL stage's --init SFT_DONE.json, an eval job's --checkpoint-from RL_DONE.json)
and the job's own settings (an eval job's --step and --group).

A stage writes its `runs` row when it starts (status running) and again when it ends (completed / failed /
interrupted), its tables as it goes, and last of all `DONE.json`, the file Snakemake waits for. Checkpoints live
beside DONE.json but are not Snakemake outputs, so Snakemake never deletes them and a re-run resumes from them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from workflow import preemption
from workflow.atomic import discard, write_json
from workflow.capture import keep_log
from workflow.data.overlap import TrainOverlap, check as check_overlap, enforce as enforce_overlap
from workflow.data.prepare import prepare
from workflow.engine_api.registry import get_engine, traits
from workflow.models import resolve_model
from workflow.eval.backends import make_backend, resolve_backend
from workflow.hub import DatasetUnavailable
from workflow.eval.harness import copy_evaluation, evaluate
from workflow.extend import record_trajectory
from workflow.errors import out_of_space
from workflow.eval.plan import eval_groups
from workflow.layout import (CHECKPOINTS, DONE, JOB_LOG, eval_file, eval_job_at, runs_file, segment_done, stage_dir,
                             step_dir, summary_path)
from workflow.preemption import EXIT_PREEMPTED, Preempted
from workflow.devices import device_used
from workflow.provenance import provenance, slurm_usage
from workflow.registry import load_object
from workflow.results.compaction import AUTO_FILES, CompactionBusy, compact, compaction_line
from workflow.results.doctor import own_temporaries
from workflow.results.summary import write_summary
from workflow.results.rows import rows_written_as
from workflow.results.train_log import TrainLog
from workflow.results.writer import write_rows
from workflow.runlock import RunLocked, run_lock, wait_for
from workflow.stages import STAGES, parse_stage, stage_of
from workflow.study import pruning
from workflow.tracking.hook import job_hook, tracking_settings
from workflow.tracking.runs import eval_points, tracked_run
from workflow.identity import canonical_json, stable_id


def read_done(path: str | Path) -> dict[str, Any]:
    """A stage's DONE.json, with the path of what it made (a checkpoint, the prepared rows, a report)."""
    path = Path(path)
    done = json.loads(path.read_text())
    for key in ("checkpoint", "output", "init"):
        if done.get(key) is not None:
            done[f"{key}_path"] = path.parent / done[key]
    return done


@dataclass(frozen=True)
class Inputs:
    """What a stage reads besides its config (the files its Snakemake rule hands it), and the gate on training."""

    init: Path | None = None  # the SFT stage's DONE.json an RL stage starts from
    checkpoint_from: Path | None = None  # the RL stage's DONE.json an eval job evaluates (step 0: or the SFT stage's)
    data: Path | None = None  # the data stage's DONE.json (datasets tasks)
    overlaps: tuple[Path, ...] = ()  # overlap stages' DONE.json the training stages check
    max_train_overlap: float | None = None  # checks.max_train_overlap of the sweep
    copy_from: Path | None = None  # an eval job's DONE.json whose rows a step-0 eval job copies (Sweep.start_sources)
    start_model: str | None = None  # the model a step-0 eval job evaluates when RL starts without SFT (model_path)
    after: Path | None = None  # the segment job before this one (workflow/segments.py): its DONE_<step>.json
    base: Path | None = None  # the pretrain stage's DONE.json an SFT stage (or an RL stage without SFT) starts from


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'rl': {'lr': 1e-4}} -> {'rl_lr': 1e-4}: hyperparameters as plain SQL column names."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        name = f"{prefix}_{k}" if prefix else k
        if isinstance(v, dict):
            out.update(flatten(v, name))
        else:
            out[name] = v
    return out


class _RunsRow:
    """The stage's row in `runs`, rewritten in place (atomically) as its status changes. An RL run trained in
    segments has one row: a segment that is not the last leaves it `paused`, and each later segment (`continues`)
    keeps its started_at and adds to its wall_s (a running segment's row holds the earlier segments' wall_s)."""

    def __init__(self, results_root: Path, sweep: str, stage: str, stage_id: str, cfg: dict, method: str,
                 label: str | None, job: dict[str, Any] | None = None, continues: bool = False,
                 copy: bool = False):
        # what it was made from: an RL run's SFT job (else its pretrained base), an SFT job's data (else its base)
        parent = (cfg.get("sft_id") or cfg.get("pretrain_id") if stage == "rl" else
                  cfg.get("run_id", cfg.get("data_id") or cfg.get("pretrain_id")))
        job = job or {}  # what tells apart the jobs of one stage id (an eval's step and benchmark group)
        self.where = (results_root, "runs",
                      runs_file(stage, stage_id, job.get("eval_step"), job.get("eval_group")))
        self.started = dt.datetime.now(dt.timezone.utc)
        self.device_of = "copy" if copy else stage  # (a copied evaluation runs on the CPU: provenance.device_used)
        self.first_started, self.earlier_wall = self.started, 0.0
        before = self._recorded() if continues else None
        if before is not None and before.get("status") != "completed":
            self.first_started, self.earlier_wall = before["started_at"], before.get("wall_s") or 0.0
        self.row = {"run_id": stage_id, "sweep": sweep, "stage": stage, "parent_id": parent, "method": method,
                    "engine": cfg.get("engine", {}).get("name"),
                    "label": label, "seed": cfg.get("seed", cfg.get("sft", {}).get("seed")),
                    "started_at": self.first_started, "config": canonical_json(cfg),
                    **provenance(), **{k: v for k, v in flatten(cfg).items() if k not in ("sft_id", "run_id", "seed")},
                    **job}

    def _recorded(self) -> dict[str, Any] | None:
        from workflow.results.rows import rows_written_as
        found = rows_written_as(*self.where)  # (a damaged file is none: rlsweep doctor says so; the row starts afresh)
        return found.select(["status", "started_at", "wall_s"]).to_pylist()[0] if found is not None else None

    def write(self, status: str, error: str | None = None) -> None:
        now = dt.datetime.now(dt.timezone.utc)
        ended = status != "running"
        write_rows(*self.where, [{**self.row, "status": status, "error": error,
                                  "finished_at": now if ended else None,
                                  "wall_s": (self.earlier_wall + (now - self.started).total_seconds() if ended
                                             else self.earlier_wall or None),
                                  **device_used(self.device_of), **(slurm_usage() if ended else {})}])


def run_stage(stage: str, sweep: str, stage_id: str, cfg: dict, *, results_root: Path, init: Path | None = None,
              checkpoint_from: Path | None = None, label: str | None = None, step: int | None = None,
              group: str | None = None, data: Path | None = None, overlap: tuple[Path, ...] = (),
              max_train_overlap: float | None = None, copy_from: Path | None = None,
              start_model: str | None = None, until: int | None = None, after: Path | None = None,
              base: Path | None = None, wait_for_twin: bool = False) -> Path:
    """Run one stage to completion; returns its DONE.json. The keywords besides `results_root` and `wait_for_twin`
    are the stages' declared options (workflow/stages.py). An eval job evaluates the RL checkpoint at `step` on
    the benchmarks of `group` (default: the final checkpoint, every benchmark). An RL job with `until` below
    rl.steps is a segment (workflow/segments.py): it trains up to that step and returns its DONE_<until>.json.
    `wait_for_twin`: when another process holds the stage (another driver on the same results), wait for it and
    return its DONE.json instead of refusing (the Snakefile's jobs do: a refused job would make Snakemake delete the
    twin's DONE.json)."""
    inputs = Inputs(init, checkpoint_from, data, tuple(overlap), max_train_overlap, copy_from, start_model, after, base)
    if stable_id(cfg) != stage_id:  # the id IS the hash of the config: a mismatch means a stale or hand-made call
        raise ValueError(f"{stage} id {stage_id} does not match its config (hash {stable_id(cfg)})")
    typed = parse_stage(stage, cfg)  # what the engine and the harness read
    job, names = {}, None  # names: the eval job's benchmarks (None = all)
    if stage == "eval":
        if start_model is not None:
            if step not in (None, 0):
                raise ValueError(f"--start-model evaluates the model RL starts from: step 0, not {step}")
            step = 0
        elif step is None:
            step = read_done(checkpoint_from or copy_from)["step"]
        groups = eval_groups(typed.eval)
        group = group or "all"
        if group != "all" and group not in groups:
            raise ValueError(f"eval group {group!r} has no benchmarks in this run (groups: {', '.join(groups)})")
        job = {"eval_step": step, "eval_group": group}
        names = None if group == "all" else groups[group]
    if stage == "rl" and until is not None:
        if not 0 < until <= typed.rl.steps:
            raise ValueError(f"--until {until}: a segment of this run ends between step 1 and rl.steps "
                             f"({typed.rl.steps})")
        if until == typed.rl.steps:
            until = None  # the last segment: the whole stage's job
    out_dir = stage_dir(results_root, stage, stage_id, cfg.get("run_id"), step, group)
    out_dir.mkdir(parents=True, exist_ok=True)
    what = f"{stage} {stage_id}" + "".join(f" {k}={v}" for k, v in job.items()) + (f" until {until}" if until else "")
    # Concurrent drivers may need the same stage: two snakemake invocations on one results directory, Optuna trials
    # sharing one SFT job. The second job waits for the first (runlock.wait_for) and uses its result.
    done = segment_done(results_root, stage, stage_id, until) if until else out_dir / DONE
    before = _stamp(done)
    while True:
        try:
            with run_lock(out_dir, what):
                if _stamp(done) not in (None, before):  # a twin finished the stage while this job waited
                    return done
                return _run_locked(stage, sweep, stage_id, cfg, typed, out_dir, results_root=results_root,
                                   inputs=inputs, label=label, step=step, job=job, names=names, until=until)
        except RunLocked:
            if not wait_for_twin:
                raise
            wait_for(out_dir, what, say=lambda line: print(line, file=sys.stderr, flush=True))


def _stamp(path: Path) -> tuple[int, int] | None:
    """Which file `path` is (inode, modification time), None when there is none: tells a DONE.json written since."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


@dataclass(frozen=True)
class Job:
    """One stage job as its runner (the stage table's `runner`, workflow/stages.py) sees it."""

    stage: str
    sweep: str
    stage_id: str
    typed: Any  # the stage's typed config (stages.parse_stage)
    out_dir: Path
    results_root: Path
    inputs: Inputs
    step: int | None
    group: str | None
    names: list[str] | None  # an eval job's benchmarks (None: all)
    runs_row: dict[str, Any]  # the job's runs row, which a runner may add to (backend, preflight)
    until: int | None = None  # an RL segment job's last step (None: the stage's last)


def _run_locked(stage: str, sweep: str, stage_id: str, cfg: dict, typed, out_dir: Path, *, results_root: Path,
                inputs: Inputs, label: str | None, step: int | None, job: dict, names: list[str] | None,
                until: int | None = None) -> Path:
    for leftover in own_temporaries(results_root, out_dir):  # a killed attempt's half-written files
        discard(leftover)
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=1, sort_keys=True))
    runs = _RunsRow(results_root, sweep, stage, stage_id, cfg, typed.rl.method if stage == "rl" else stage, label, job,
                    continues=inputs.after is not None, copy=inputs.copy_from is not None)
    runs.write("running")
    runner = load_object(stage_of(stage).runner)
    try:
        done = runner(Job(stage, sweep, stage_id, typed, out_dir, results_root, inputs, step, job.get("eval_group"),
                          names, runs.row, until))
    except BaseException as e:  # noqa: BLE001 - record why, then let it propagate
        status = ("preempted" if isinstance(e, (Preempted, preemption.Resumable)) else
                  "pruned" if isinstance(e, pruning.Pruned) else
                  "interrupted" if isinstance(e, (KeyboardInterrupt, Terminated)) else "failed")
        runs.write(status, f"{type(e).__name__}: {e}")
        raise
    record = {"stage": stage, "id": stage_id, **done, "finished_at": dt.datetime.now(dt.timezone.utc).isoformat()}
    if until is not None:  # a segment: the next one continues the run (and its runs row)
        path = write_json(segment_done(results_root, stage, stage_id, until), record)
        runs.write("paused")
        return path
    done_path = write_json(out_dir / DONE, record)
    if stage == "rl":  # the last segment's file too: what the evaluation of the last step waits for
        write_json(segment_done(results_root, stage, stage_id, typed.rl.steps), record)
        record_trajectory(results_root, cfg, stage_id)  # a donor for a longer run of the same settings
    runs.write("completed")
    return done_path


def run_data(job: Job) -> dict[str, Any]:
    """The data stage: the training sets read, filtered and written once (workflow/data/prepare.py)."""
    return {"output": os.path.relpath(prepare(job.typed.task, job.out_dir), job.out_dir)}


def run_overlap(job: Job) -> dict[str, Any]:
    """The overlap check of the prepared rows against the evaluated benchmarks (workflow/data/overlap.py)."""
    rows, t = read_done(job.inputs.data)["output_path"], job.typed
    return {"output": os.path.relpath(check_overlap(rows, t.benchmarks, t.paths, t.revisions, job.out_dir),
                                      job.out_dir)}


def run_training(job: Job) -> dict[str, Any]:
    """A pretrain, SFT or RL stage on its engine, to its final checkpoint."""
    ckpt = _train(job.stage, job.sweep, job.stage_id, job.typed, job.out_dir, job.results_root, job.inputs,
                  job.runs_row, job.until)
    done = {"step": json.loads((Path(ckpt) / "meta.json").read_text())["step"],
            "checkpoint": os.path.relpath(ckpt, job.out_dir)}
    if job.stage == "rl":  # what it started from: an eval at step 0 (eval.at_start) evaluates that
        if job.inputs.init or job.inputs.base:  # its SFT checkpoint, else its pretrained base
            start = read_done(job.inputs.init or job.inputs.base)["checkpoint_path"]
            done["init"] = os.path.relpath(start, job.out_dir)
        elif (start := traits(job.typed.engine.name).start_model(job.typed)) is not None:
            done["init_model"] = start
    return done


def run_evaluation(job: Job) -> dict[str, Any]:
    """An eval job: the checkpoint at its step sampled and scored on its group's benchmarks, or (step 0 of a run
    whose start another run evaluated) that evaluation's rows copied."""
    typed, inputs, step = job.typed, job.inputs, job.step
    if inputs.copy_from is not None:
        source = eval_job_at(Path(inputs.copy_from).resolve().parent)
        if source is None or source.step != step or source.group != job.group:
            raise ValueError(f"{inputs.copy_from} is not the DONE.json of an eval job at step {step} of "
                             f"group {job.group}")
        job.runs_row["backend"] = "copy"
        names = job.names or typed.eval.benchmarks
        copy_evaluation(source.run_id, source.stage_id, step, names,
                        results_root=job.results_root, sweep=job.sweep, run_id=typed.run_id, eval_id=job.stage_id)
        copied = [rows_written_as(job.results_root, "eval_scores", eval_file(typed.run_id, job.stage_id, step, name))
                  for name in names]
        _track_evaluation(job, [r for found in copied if found is not None for r in found.to_pylist()])
        return {"step": step, "copied_from": {"run_id": source.run_id, "eval_id": source.stage_id}}
    ckpt = inputs.start_model or _checkpoint_at(Path(inputs.checkpoint_from), step)
    ev, device = typed.eval, traits(typed.engine.name).eval_device(typed.engine)
    job.runs_row["backend"] = resolve_backend(ev.backend, device)  # which backend produced the samples
    # a model_path (str) is what verl's RL starts from: rlsweep:tiny is built here as the RL stage builds it
    model = resolve_model(ckpt, job.out_dir) if isinstance(ckpt, str) else ckpt
    backend = make_backend(ev.backend, model, tensor_parallel_size=ev.tensor_parallel_size, seed=ev.seed,
                           device=device, log=job.out_dir / "vllm.log", label=f"eval {typed.run_id} step {step}")
    results = evaluate(backend, typed.task, ev, step, results_root=job.results_root, sweep=job.sweep,
                       run_id=typed.run_id, eval_id=job.stage_id, names=job.names)
    _track_evaluation(job, [{"benchmark": name, "step": step, "k": k, **v} for name, by_k in results.items()
                            for k, v in by_k.items()])
    # each benchmark's avg@k beside the job's outcome: what `rlsweep watch` shows without a query (a view: the
    # eval_scores rows stay the record)
    scores = {"scores": {name: by_k[1]["avg_at_k"] for name, by_k in results.items()}}
    if isinstance(ckpt, Path):
        return {"step": step, "checkpoint": os.path.relpath(ckpt, job.out_dir), **scores}
    return {"step": step, "model": ckpt, **scores}  # a Hugging Face id: verl's model_path, evaluated at step 0


def _track_sweep(results_root: Path, sweep: str) -> None:
    """The sweep's last job: its trackers get what they lack (stages reused from other sweeps, what a job's trackers
    missed); a failure is a warning, never the sweep's (`rlsweep track` retries it)."""
    settings = tracking_settings(results_root, sweep)
    if not settings:
        return
    from workflow.tracking.backfill import track
    try:
        track(results_root, sweep, settings, say=lambda line: print(f"trackers: {line}", file=sys.stderr))
    except Exception as e:  # noqa: BLE001
        print(f"warning: trackers of {sweep}: {type(e).__name__}: {e}; `rlsweep track` sends what they lack",
              file=sys.stderr)


def _track_evaluation(job: Job, scores: list[dict[str, Any]]) -> None:
    """An evaluation's scores into its RL run's tracker run, at the step it evaluated, whenever it finishes (the
    sweep's trackers; bounded in time, never failing the job: workflow/tracking/hook.py)."""
    hook = job_hook(job.results_root, job.sweep, tracked_run("rl", job.typed.run_id, {}, label=job.runs_row.get(
        "label"), seed=job.runs_row.get("seed"), sweep=job.sweep))
    if hook is not None:
        hook.points(eval_points(scores))
        hook.close()


def _checkpoint_at(rl_done: Path, step: int) -> Path | str:
    """The RL run's checkpoint at `step`; step 0 is the model it started from (its SFT checkpoint, its pretrained
    base, or verl's model_path), read from the RL stage's DONE.json or, when the job was handed the DONE.json of the
    stage it starts from (SFT or pretrain), from that."""
    if step == 0:
        done = read_done(rl_done)
        if done.get("stage") in ("sft", "pretrain"):
            return done["checkpoint_path"]
        start = done.get("init_path") or done.get("init_model")
        if start is None:
            raise FileNotFoundError(f"{rl_done} does not say what the RL run started from (eval.at_start)")
        return start
    ckpt = step_dir(rl_done.parent / CHECKPOINTS, step)
    if not (ckpt / "meta.json").is_file():
        raise FileNotFoundError(f"no RL checkpoint at step {step}: {ckpt}")
    return ckpt


def _train(stage: str, sweep: str, stage_id: str, typed, out_dir: Path, results_root: Path, inputs: Inputs,
           runs_row: dict, until: int | None = None) -> Path:
    """A pretrain, SFT or RL stage on its engine; returns the final checkpoint. Refuses training data that holds more
    of an evaluated benchmark than the sweep allows, and an SFT or mixed-policy job that fails the integrity
    preflight."""
    enforce_overlap([read_done(p)["output_path"] for p in inputs.overlaps], inputs.max_train_overlap)
    engine = get_engine(typed.engine.name)
    data = read_done(inputs.data)["output_path"] if inputs.data else None
    tracked = tracked_run(stage, stage_id, json.loads(runs_row["config"]), label=runs_row.get("label"),
                          seed=runs_row.get("seed"), sweep=sweep, method=runs_row.get("method"))
    log = TrainLog(results_root, sweep, stage, stage_id, total=getattr(typed, stage).steps, until=until,
                   tracked=tracked)
    try:
        done = _train_on(engine, stage, sweep, stage_id, typed, out_dir, results_root, inputs, runs_row, log, data,
                         until)
    except BaseException:
        log.close()
        raise
    log.close(finished=until is None)
    return done


def _train_on(engine, stage: str, sweep: str, stage_id: str, typed, out_dir: Path, results_root: Path,
              inputs: Inputs, runs_row: dict, log: TrainLog, data, until: int | None) -> Path:
    if stage == "pretrain":
        return engine.pretrain(typed, out_dir, log)
    base = read_done(inputs.base)["checkpoint_path"] if inputs.base else None
    # RL starts from its SFT checkpoint, else from the pretrained base (else the engine's own start)
    init_ckpt = (read_done(inputs.init)["checkpoint_path"] if inputs.init else base) if stage == "rl" else None
    if stage == "sft" or typed.rl.mix != "none":  # (an SFT job's probe starts from its base, as the job does)
        _preflight(engine, typed, init_ckpt if stage == "rl" else base, data, runs_row, f"{stage} {stage_id}")
    if stage == "sft":  # (`base` only when there is one: an engine that never pretrains takes no such keyword)
        return engine.sft(typed, out_dir, log, data=data, **({"base": base} if base is not None else {}))
    pruning.refuse_if_pruned(out_dir)  # its Optuna study stopped it: nothing trains past the pruned step
    segment = {"until": until} if until is not None else {}  # (an engine that trains in segments takes it)
    return engine.rl(typed, init_ckpt, out_dir, log, data=data, **segment)


def _preflight(engine, typed, init_ckpt: Path | None, data: Path | None, runs_row: dict, what: str) -> None:
    """The integrity preflight (workflow/preflight.py) on the job's own configuration, recorded in its runs row;
    raises IntegrityError (the job fails, saying which property broke and by how much) before anything trains."""
    make_probe = getattr(engine, "integrity_probe", None)
    probe = make_probe(typed, init_ckpt, data) if make_probe is not None else None
    if probe is None:  # an engine without a probe
        runs_row["preflight"] = "not available"
        return
    from workflow import preflight  # imports torch: only training jobs pay for it
    result = preflight.check(probe)
    runs_row.update(result.as_row())
    preflight.enforce(result, what)


class Terminated(Exception):
    """SIGTERM arrived (scancel, a hard requeue, a node going down): unwind so the runs row says so."""


def _terminated(signum, frame) -> None:
    raise Terminated()


def auto_compact(results_root: Path) -> None:
    """The end of a sweep: pack the finished stages' table files (every sweep's) once there are many (compaction.py),
    so queries stay fast; $RLSWEEP_AUTO_COMPACT sets how many (0: never). The summary is written first: it never
    waits on compaction or fails with it."""
    min_files = int(os.environ.get("RLSWEEP_AUTO_COMPACT", AUTO_FILES))
    if min_files <= 0:
        return
    try:
        done = compact(results_root, min_files=min_files)
    except CompactionBusy as e:
        print(f"aggregate: not compacted: {e}", file=sys.stderr)
        return
    if done:
        print(f"aggregate: compacted the tables: {compaction_line(done)}", file=sys.stderr)


def parser() -> argparse.ArgumentParser:
    """scripts/stage.py's command line: one sub-command per declared stage (workflow/stages.py STAGES), each with the
    options every job takes and the stage's own, and `aggregate`."""
    p = argparse.ArgumentParser(prog="stage.py", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    commands = p.add_subparsers(dest="stage", required=True, metavar="STAGE")

    def common(command: argparse.ArgumentParser) -> None:
        command.add_argument("--sweep", required=True, help="the sweep the job belongs to")
        command.add_argument("--results", type=Path, default=Path(os.environ.get("RLSWEEP_RESULTS", "results")))
        command.add_argument("--threads", type=int, default=1)
    for stage in STAGES.values():
        command = commands.add_parser(stage.name, help=stage.help, description=stage.help)
        common(command)
        command.add_argument("--id", required=True, help="the stage id (the hash of --config)")
        command.add_argument("--config", required=True, help="the stage config as JSON")
        command.add_argument("--wait-for-twin", action="store_true", help="another process running this stage is "
                             "waited for and its result used (the Snakefile's jobs), instead of refused")
        for option in stage.options:
            command.add_argument(option.flag, dest=option.name, type=option.type, help=option.help,
                                 **({"nargs": "*", "default": []} if option.many else {}))
    command = commands.add_parser("aggregate", help="the sweep's summary table, then compaction of the tables")
    common(command)
    command.add_argument("--out", type=Path, help="where to write the summary")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    torch.set_num_threads(a.threads)
    t0 = time.monotonic()
    if a.stage == "aggregate":
        write_summary(a.results, a.sweep, a.out or summary_path(a.results, a.sweep))
        _track_sweep(a.results, a.sweep)
        auto_compact(a.results)
        return 0
    cfg = json.loads(a.config)
    step = getattr(a, "step", None)  # (an eval job's: Snakemake's name theirs; one without leaves the log out)
    if a.stage != "eval" or step is not None:
        group = (getattr(a, "group", None) or "all") if a.stage == "eval" else None
        keep_log(stage_dir(a.results, a.stage, a.id, cfg.get("run_id"), step, group) / JOB_LOG)
    preemption.install()  # checkpoint and stop at the next step boundary on SLURM's warning signal
    signal.signal(signal.SIGTERM, _terminated)  # scancel / hard requeue: record "interrupted", then go
    try:
        run_stage(a.stage, a.sweep, a.id, cfg, results_root=a.results, wait_for_twin=a.wait_for_twin,
                  **{o.name: getattr(a, o.name) for o in stage_of(a.stage).options})
    except (DatasetUnavailable, RunLocked, TrainOverlap) as e:  # a problem with a clear fix: the message, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Preempted as e:
        print(f"{a.stage} {a.id}: {e}; it resumes from there when run again", file=sys.stderr)
        return EXIT_PREEMPTED
    except preemption.Resumable as e:
        print(f"error: {a.stage} {a.id}: {e}\nit resumes from its newest checkpoint when run again (a SLURM job "
              "requeues itself)", file=sys.stderr)
        return EXIT_PREEMPTED
    except pruning.Pruned as e:
        print(f"{a.stage} {a.id}: {e}", file=sys.stderr)
        return pruning.EXIT_PRUNED
    except Terminated:
        print(f"{a.stage} {a.id}: terminated (SIGTERM); it resumes from its newest checkpoint", file=sys.stderr)
        return 128 + signal.SIGTERM
    except Exception as e:  # noqa: BLE001 - a full disk gets one line naming it; anything else its traceback
        line = out_of_space(e, a.results)
        if line is None:
            raise
        print(f"{a.stage} {a.id}: {line}", file=sys.stderr)
        return 1
    print(f"{a.stage} {a.id} done in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    return 0
