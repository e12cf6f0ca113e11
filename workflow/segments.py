"""An RL run trained as a chain of segment jobs (`rl.segment_steps`): each job trains from where the one before
stopped up to its end step, checkpoints there and stops; the next resumes from that checkpoint with the optimizer,
scheduler, sampler, gate and RNG state, so the chain trains what one job would (on the local engine bit for bit:
every random draw of step t comes from generators seeded by (seed, t), workflow/engines/local.py). The evaluation of
step N waits only for the segment that ends at N, so it runs while the next segment trains.

A segment ends at every `segment_steps` steps, at every evaluated step and at the last step. Its job writes
`DONE_<end>.json` beside the run's checkpoints (workflow/layout.py `segment_done`); the last also writes the run's
`DONE.json`. A run shorter than one segment, or on an engine that does not train in segments, is one job, as before.
On the verl engine a chain resumes from verl's own checkpoints, as a requeued job does, and every rollout request is
seeded from (seed, step, row, session), so it draws one job's rollouts: the chain ends as close to one job as one job
to itself (bench/verl_chain.py). Each of its jobs starts Ray and vLLM: `rl.segment_steps: 0` keeps a run in one job.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from workflow.atomic import write_json
from workflow.engine_api.registry import traits
from workflow.eval.plan import eval_steps
from workflow.layout import CHECKPOINTS, DONE, done_path, segment_done, step_dir


def segment_ends(cfg) -> list[int]:
    """The steps at which the run's RL segment jobs end, in order; the last is rl.steps."""
    total, engine = cfg.rl.steps, traits(cfg.engine.name)
    size = cfg.rl.segment_steps
    if size is None:  # the default: the evaluation interval, where the engine splits runs unasked
        size = (cfg.eval.every or total) if engine.segments_by_default else 0
    if size == 0 or not engine.trains_in_segments:
        return [total]
    return sorted({*range(size, total, size), *(s for s in eval_steps(cfg) if 0 < s < total), total})


def _missing(results_root: str | Path, run) -> list[Path]:
    """The segment files a finished RL run lacks (none for a run not finished: its segment jobs write them)."""
    if not done_path(results_root, "rl", run.run_id).exists():
        return []
    return [p for end in run.segment_ends if not (p := segment_done(results_root, "rl", run.run_id, end)).exists()]


def record_finished(results_root: str | Path, runs) -> int:
    """For each finished RL run, the segment files it lacks: a run trained in one job before segments existed, or
    one whose segments now also end at a step newly evaluated. Each is dated like the checkpoint of its step (or,
    without one, like the run's DONE.json): as old as the weights it stands for, so the chain counts as done and
    nothing that read those weights (an evaluation, which may have started before the run finished) looks older
    than its input: nothing trains or evaluates again. Returns how many runs it recorded."""
    recorded = 0
    for run in runs:
        missing = _missing(results_root, run)
        if not missing:
            continue
        done = done_path(results_root, "rl", run.run_id)
        finished = json.loads(done.read_text())
        for path in missing:
            end = int(path.stem.split("_")[1])
            record, dated = {k: v for k, v in finished.items() if k != "checkpoint"}, done
            if (ckpt := step_dir(done.parent / CHECKPOINTS, end)).is_dir():
                record["checkpoint"] = os.path.relpath(ckpt, done.parent)
                dated = ckpt / "meta.json" if (ckpt / "meta.json").is_file() else ckpt
            write_json(path, {**record, "step": end, "recorded_from": DONE})
            stamp = dated.stat()
            os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        recorded += 1
    return recorded


def unrecorded_finished(results_root: str | Path, runs) -> int:
    """How many finished runs lack segment files (what a dry run, which writes nothing, cannot record)."""
    return sum(1 for r in runs if _missing(results_root, r))
