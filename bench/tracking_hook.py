#!/usr/bin/env python3
"""What do the experiment trackers cost a training step? The demo's RL step (sweeps/demo.yaml's GRPO run, its
model and rollout shape, from the random init: no SFT job first) with all three trackers on (TensorBoard, MLflow on
SQLite, W&B offline) against the same job with tracking off, measured side by side in this run.

Per arm the RL job runs `--steps` steps in this process, `--repeat` times, alternating off / on. Printed:
  step off / on   the median seconds of a step after the first (train_steps' wall_s), and on / off
  job thread      what the hook adds to the job's own thread per step (queueing the row: TrainLog.record timed
                  with and without trackers over 10,000 rows)
  background      the trackers' CPU seconds per step (sending the same rows): their process's, beside the job
                  (workflow/tracking/child.py), on another core or at nice 19
Goal (issue 60): the hook <= 1% of a demo RL step.

    python bench/tracking_hook.py [--steps 40] [--repeat 3] [--only tensorboard mlflow wandb]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("WANDB_SILENT", "true")

from workflow.launch import run_stage  # noqa: E402
from workflow.results.catalog import query  # noqa: E402
from workflow.results.train_log import TrainLog  # noqa: E402
from workflow.sweep.expand import load_sweep  # noqa: E402
from workflow.tracking.child import TrackerProcess  # noqa: E402
from workflow.tracking.hook import record_tracking  # noqa: E402
from workflow.tracking.runs import TrackedRun  # noqa: E402

SENT_TOGETHER = 16  # rows the hook sends in one call: about a demo step's (0.3 s) worth of SEND_EVERY_S (5 s)
TRACKING = {"tensorboard": {}, "mlflow": {}, "wandb": {"project": "rlsweep-bench", "mode": "offline"}}


def demo_rl(directory: Path, steps: int):
    text = (REPO / "sweeps" / "demo.yaml").read_text()
    text = text.replace("  sft: {steps: 600,", "  sft: {enabled: false, steps: 600,")
    text = text.replace("    steps: 80 ", f"    steps: {steps} ").replace("checkpoint_every: 20", f"checkpoint_every: {steps}")
    text = text.replace("    at_start: true", "    at_start: false").replace("rl.update: [grpo, sfpo, gxpo]", "rl.update: [grpo]").replace("seeds: [0, 1]", "seeds: [0]")
    path = directory / "bench_tracking.yaml"
    path.write_text(text.replace("name: demo", "name: bench_tracking"))
    return load_sweep(path).runs[0]


def run_once(run, root: Path, tracking: bool) -> list[float]:
    if tracking:
        record_tracking(root, "bench_tracking", TRACKING)
    run_stage("rl", "bench_tracking", run.run_id, run.stage_config("rl"), results_root=root, label=run.label)
    rows = query(f"SELECT step, wall_s FROM train_steps WHERE run_id = '{run.run_id}' ORDER BY step", root).to_pylist()
    return [r["wall_s"] for r in rows[1:]]


class Null:
    def rows(self, rows):
        pass


def job_thread_cost(tmp: Path, n: int = 10_000) -> tuple[float, float]:
    """Seconds per TrainLog.record without trackers and with the three (their hook queueing the row)."""
    row = {f"m{i}": 0.5 for i in range(30)}
    out = []
    for hook in (None, "on"):
        log = TrainLog(tmp / f"rec-{hook}", "b", "rl", "0123456789ab")
        if hook:
            record_tracking(tmp / "rec-on", "b", TRACKING)
            log.trackers = TrackerProcess(TRACKING, TrackedRun("rl", "0123456789ab", "x", 0), "b", tmp / "rec-on")
        t0 = time.perf_counter()
        for step in range(1, n + 1):
            log.record(step=step, **row)
        out.append((time.perf_counter() - t0) / n)
        log.pending = []
        if hook:
            log.trackers.close(timeout_s=600)
    return out[0], out[1]


def background_cost(tmp: Path, n: int = 200) -> float:
    """The trackers' CPU seconds per row (opening them included, once): what their process spends beside the job."""
    from workflow.tracking.base import make
    from workflow.tracking.runs import train_points
    rows = [{"step": s, **{f"m{i}": 0.5 for i in range(30)}} for s in range(1, n + 1)]
    c0 = time.thread_time()
    for name, settings in TRACKING.items():
        tracker = make(name, settings, "bg", tmp / "bg")
        tracker.open(TrackedRun("rl", "0123456789ab", "x", 0))
        tracker.logged()
        for i in range(0, len(rows), SENT_TOGETHER):  # as the hook sends them: what queued in SEND_EVERY_S
            tracker.log(train_points(rows[i:i + SENT_TOGETHER]))
        tracker.close()
    return (time.thread_time() - c0) / n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", nargs="+", choices=sorted(TRACKING), help="these trackers only (default: all three)")
    a = p.parse_args()
    if a.only:
        for name in set(TRACKING) - set(a.only):
            del TRACKING[name]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        run = demo_rl(tmp, a.steps)
        off, on = [], []
        for i in range(a.repeat):
            off += run_once(run, tmp / f"off{i}", False)
            on += run_once(run, tmp / f"on{i}", True)
        step_off, step_on = statistics.median(off), statistics.median(on)
        per_row_off, per_row_on = job_thread_cost(tmp)
        box = {}
        t = threading.Thread(target=lambda: box.update(cpu=background_cost(tmp)))
        t.start()
        t.join()
        print(f"demo RL step: off {step_off:.3f} s, on {step_on:.3f} s (median of {len(off)} steps each): "
              f"on / off {step_on / step_off:.3f}")
        added = per_row_on - per_row_off
        print(f"job thread: {added * 1e6:.1f} us a step ({100 * added / step_off:.4f}% of a step)")
        print(f"background: {box['cpu'] * 1e3:.2f} ms CPU a step in the trackers' process "
              f"({100 * box['cpu'] / step_off:.2f}% of a step)")
        print(json.dumps({"step_off_s": step_off, "step_on_s": step_on, "job_thread_s": added,
                          "background_cpu_s": box["cpu"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
