"""Extend a finished RL run without training it again (issue 47).

A run whose settings differ from a finished run's only in `rl.steps` trains, step by step, what that run trained:
on an engine that trains in segments every random draw of step t comes from generators seeded by (seed, t)
(workflow/engines/local.py), and the learning rate does not read the total. So when such a run has a finished
shorter *donor* (in the shared store, from any sweep), its first segments are the donor's: the donor's checkpoints
at those segments' ends are linked into the run's directory, the donor's `train_steps` rows up to there are copied
under the run's id, and the segment files are written (`DONE_<end>.json`, with `extended_from`), so Snakemake sees
those segments done and the next segment resumes from the last of them. Only the new steps train.

On an engine that resumes from its own checkpoint format (verl's `global_step_N/`: optimizer, dataloader position,
the method's state), what its traits' `resume_state` names is linked too, and `mark_resume` points its next job at
the last step taken.

A run cannot take a donor's steps when a step of it reads the training progress `step / rl.steps` (a method whose
card says so: Prefix-RFT's prefix schedule, Slow2Fast's phases), when its engine's settings schedule something over
rl.steps (the engine's `reads_total_steps`: verl's cosine decay or a warm-up ratio), or on an engine whose traits do
not extend runs: `trains_from_step_0` says why, and `rlsweep plan` prints it beside a run that has a donor it cannot
use.

The donors are found through an index in the store, `_store/trajectories/<key>/<run id>.json`, written when an RL
run finishes (and, for runs finished before the index existed, once by `index_finished`); `key` hashes the run's RL
stage config without `rl.steps` (`trajectory_key`). An entry whose run was removed since (rlsweep gc) is skipped.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from workflow.atomic import write_json
from workflow.engine_api.registry import traits
from workflow.layout import (CHECKPOINTS, DONE, done_path, list_checkpoints, segment_done, stage_dir, step_dir,
                             store_dir, train_steps_file)
from workflow.identity import stable_id

TRAJECTORIES = "trajectories"
INDEXED = ".indexed"  # in TRAJECTORIES: the runs finished before the index existed are in it (index_finished)


def trajectory_key(rl_config: dict) -> str:
    """What a run trains step by step, whatever its last step: the hash of its RL stage config without rl.steps."""
    return stable_id({**rl_config, "rl": {k: v for k, v in rl_config["rl"].items() if k != "steps"}})


def trains_from_step_0(cfg) -> str | None:
    """Why a run cannot take its first steps from a finished shorter run (None: it can)."""
    engine = traits(cfg.engine.name)
    if not engine.extends_finished_runs:
        return f"extending a run is not built for the {cfg.engine.name} engine"
    return next((m.reads_total_steps for m in cfg.rl.selected if m.reads_total_steps), None) or \
        engine.reads_total_steps(cfg)


def _index(results_root: str | Path, key: str) -> Path:
    return store_dir(results_root) / TRAJECTORIES / key


def record_trajectory(results_root: str | Path, rl_config: dict, run_id: str) -> None:
    """Index a finished RL run as a donor for longer runs of the same settings (launch: when its last job ends)."""
    write_json(_index(results_root, trajectory_key(rl_config)) / f"{run_id}.json",
               {"run_id": run_id, "steps": rl_config["rl"]["steps"]})


def index_finished(results_root: str | Path) -> int:
    """Index the finished RL runs of a store indexed never before (runs finished before the index existed); once per
    store, which a marker file records (a run that finished since indexed itself, but not the runs before it).
    Returns how many it indexed."""
    root = store_dir(results_root) / TRAJECTORIES
    if (root / INDEXED).is_file():
        return 0
    found = 0  # (a new store: none, and the marker made now, before any run finishes, so a rerun writes nothing)
    for done in sorted((store_dir(results_root) / "rl").glob(f"*/{DONE}")):
        if any(root.glob(f"*/{done.parent.name}.json")):  # finished since the index existed: indexed itself
            continue
        try:
            config = json.loads((done.parent / "config.json").read_text())
        except (OSError, ValueError):  # a damaged run (rlsweep doctor reports it): no donor
            continue
        if traits(config.get("engine", {}).get("name", "local")).extends_finished_runs:
            record_trajectory(results_root, config, done.parent.name)
            found += 1
    write_json(root / INDEXED, {"indexed": found})
    return found


@dataclass(frozen=True)
class Extension:
    """A run that takes its first segments from a finished shorter run."""

    run: object  # the sweep's Run
    donor: str  # the finished run's id
    ends: tuple[int, ...]  # the run's segment ends it takes (each a checkpoint of the donor)

    @property
    def last(self) -> int:
        return self.ends[-1]


def _donor(results_root: str | Path, key: str, run_id: str, steps: int) -> tuple[str, int] | None:
    """The finished run of this key with the most steps below `steps` (None: none)."""
    best = None
    for entry in _index(results_root, key).glob("*.json"):
        try:
            found = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue
        if found["run_id"] != run_id and found["steps"] < steps and \
                done_path(results_root, "rl", found["run_id"]).is_file() and \
                (best is None or found["steps"] > best[1]):
            best = (found["run_id"], found["steps"])
    return best


def _started(results_root: str | Path, run) -> bool:
    """The run has trained or taken something already (its own checkpoints, segments or DONE.json)."""
    d = stage_dir(results_root, "rl", run.run_id)
    return d.is_dir() and (any(d.glob("DONE*.json")) or bool(list_checkpoints(d / CHECKPOINTS)))


def extensions(results_root: str | Path, runs) -> tuple[list[Extension], list[tuple[object, str, str]]]:
    """The sweep's runs not started yet that can take their first segments from a finished shorter run, and
    (run, donor id, why not) for those that have such a run but must train from step 0."""
    if not (store_dir(results_root) / TRAJECTORIES).is_dir():
        return [], []
    can, cannot, seen = [], [], set()
    for run in runs:
        if run.run_id in seen or _started(results_root, run):
            continue
        seen.add(run.run_id)
        rl_config = run.stage_config("rl")
        found = _donor(results_root, trajectory_key(rl_config), run.run_id, run.config.rl.steps)
        if found is None:
            continue
        donor, steps = found
        if (why := trains_from_step_0(run.config)) is not None:
            cannot.append((run, donor, why))
            continue
        src, engine = stage_dir(results_root, "rl", donor), traits(run.config.engine.name)
        held = {s for s, _ in list_checkpoints(src / CHECKPOINTS)}
        ends = []
        for end in run.segment_ends:  # the run's segments, as long as the donor holds what a job resumes from there
            if end > steps or end not in held or not all((src / p).is_dir() for p in engine.resume_state(end)):
                break
            ends.append(end)
        if ends:
            can.append(Extension(run, donor, tuple(ends)))
    return can, cannot


def donor_steps(results_root: str | Path, ext: Extension) -> tuple[list[dict], str | None]:
    """The donor's train_steps rows of steps 1..ext.last, read wherever they are (its own files or a pack:
    results/rows.py), and None; or ([], why they cannot be taken): a step missing or held twice."""
    from workflow.results.rows import stage_rows  # (here: planning, which imports this module, needs no pyarrow)
    found = stage_rows(results_root, "train_steps", "rl", ext.donor)
    rows = [] if found is None else [r for r in found.to_pylist() if r["step"] <= ext.last]
    held = Counter(r["step"] for r in rows)
    missing = [s for s in range(1, ext.last + 1) if held[s] == 0]
    twice = sorted(s for s, n in held.items() if n > 1)
    if not missing and not twice:
        return sorted(rows, key=lambda r: r["step"]), None
    problems = ([f"lacks step(s) {step_ranges(missing)}"] if missing else []) + \
        ([f"holds step(s) {step_ranges(twice)} more than once"] if twice else [])
    return [], (f"the finished run {ext.donor}'s train_steps {' and '.join(problems)} of 1-{ext.last}, so its steps "
                f"cannot be taken (`rlsweep doctor` examines it); this run trains from step 0")


def step_ranges(steps: list[int]) -> str:
    """[1, 2, 3, 7, 9, 10] -> '1-3, 7, 9-10'."""
    out: list[list[int]] = []
    for s in steps:
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def extend(results_root: str | Path, sweep: str, ext: Extension) -> str | None:
    """Give the run its donor's first segments: checkpoints linked (copied across file systems), train_steps rows
    copied under the run's id, segment files last (what Snakemake sees: written only when the rest is in place).
    Returns None, or why the donor was refused: its rows of the taken steps are not each there once. Then nothing
    is written, so the run trains from step 0 (a linked checkpoint alone would make it resume there without the
    rows of the steps before: a run marked done with gaps)."""
    from workflow.results.schemas import schema as table_schema
    from workflow.results.writer import write_rows

    rows, refused = donor_steps(results_root, ext)
    if refused is not None:
        return refused
    run_id, src = ext.run.run_id, stage_dir(results_root, "rl", ext.donor)
    dst, engine = stage_dir(results_root, "rl", run_id), traits(ext.run.config.engine.name)
    for end in ext.ends:
        ckpt = os.path.relpath(step_dir(dst / CHECKPOINTS, end), dst)
        for folder in (ckpt, *engine.resume_state(end)):  # the exported weights, the engine's own resume state
            _link_tree(src / folder, dst / folder)
    engine.mark_resume(dst, ext.last)
    columns = table_schema("train_steps").names  # (a pack's rows carry every column the pack holds)
    write_rows(results_root, "train_steps", train_steps_file("rl", run_id, 1, ext.last),
               [{**{k: r.get(k) for k in columns}, "run_id": run_id, "sweep": sweep} for r in rows])
    for end in ext.ends:
        write_json(segment_done(results_root, "rl", run_id, end),
                   {"stage": "rl", "id": run_id, "step": end,
                    "checkpoint": os.path.relpath(step_dir(dst / CHECKPOINTS, end), dst), "extended_from": ext.donor})
    return None


def evaluations_to_copy(results_root: str | Path, ext: Extension) -> list[tuple[int, str, Path]]:
    """(step, benchmark group, the donor's eval DONE.json) of each evaluation of a step the run took that the donor
    ran with the same eval settings and the run has not: the same weights (linked) and settings score the same, so
    its rows are copied (launch.run_stage with copy_from, as rule eval_copy does for a shared start) instead of
    sampled again, which at scale is most of an evaluation's GPU time."""
    mine = ext.run.stage_config("eval")
    theirs = stable_id({**mine, "run_id": ext.donor})  # the donor's eval id had it been evaluated with these settings
    out = []
    for step, group in ext.run.eval_jobs:
        if not 0 < step <= ext.last or done_path(results_root, "eval", ext.run.eval_id, ext.run.run_id, step,
                                                 group).exists():
            continue
        if (source := done_path(results_root, "eval", theirs, ext.donor, step, group)).is_file():
            out.append((step, group, source))
    return out


def _link_tree(src: Path, target: Path) -> None:
    """`src`'s files linked under `target`, all or none (kept if `target` is already there)."""
    if target.is_dir():
        return
    partial = target.with_name(f".{target.name}.tmp-extend")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(src, partial, copy_function=_link_or_copy)
    partial.rename(target)  # a complete checkpoint or none, as the engines write theirs


def _link_or_copy(src: str, dst: str) -> None:
    """A hard link (no second copy of the weights; checkpoints are never written in place), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
