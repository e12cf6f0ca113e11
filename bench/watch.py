#!/usr/bin/env python3
"""Is `rlsweep watch` cheap at 10,000 runs? CPU time of one refresh over a synthetic store in which a large sweep is
mid-way, next to the least any look at it costs: one `os.stat` of each stage job's DONE file.

The sweep: one SFT job and `--runs` RL runs (a grid over rl.lr x seeds), each with its final evaluation. The store,
written as the jobs and the SLURM executor write it: the SFT job done; of the runs, 40% done (DONE.json, live file,
an eval DONE.json with scores), 30% running (a renewed RUNNING.lock, live file, runs row), 10% queued on SLURM
(SLURM.json; the fake squeue lists them), 10% failed (runs row with its error, a job.log), 10% not started.
Timed, as CPU seconds of this process (time.process_time):
  first       the first refresh of a `Watcher` (every file read once)
  refresh     the next refreshes (the median of --repeat, --every seconds apart on watch's clock): what `watch`
              pays every --every seconds; the slowest is one that replays the sweep's ETA (every 15 s)
  stat walk   os.stat of every job's DONE file: the floor of any view of the sweep
and the squeue calls per refresh. Goal (issue 60): refresh <= 1 s of CPU at 10,000 runs, one squeue call.

    python bench/watch.py [--runs 10000] [--repeat 6] [--every 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from workflow.atomic import write_json  # noqa: E402
from workflow.layout import JOB_LOG, SLURM_RECORD, done_path, runs_file, stage_dir  # noqa: E402
from workflow.live import LiveFile  # noqa: E402
from workflow.results.writer import write_rows  # noqa: E402
from workflow.runlock import LOCK_NAME  # noqa: E402
from workflow.slurm.cluster import JobState  # noqa: E402
from workflow.sweep.expand import load_sweep  # noqa: E402
from workflow.watch.snapshot import Watcher  # noqa: E402
from workflow.watch.view import plain  # noqa: E402

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def sweep_file(directory: Path, runs: int) -> Path:
    seeds = 10
    lrs = [f"{1e-6 * (1 + i):.3e}" for i in range(max(runs // seeds, 1))]
    path = directory / "bench_watch.yaml"
    path.write_text(f"""name: bench_watch
base:
  model: {{n_layers: 1, hidden: 32, n_heads: 2}}
  sft: {{steps: 20, batch_size: 32, checkpoint_every: 10}}
  rl: {{steps: 100, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, checkpoint_every: 50}}
  eval: {{k: 2, max_new_tokens: 16}}
grid:
  rl.lr: [{", ".join(lrs)}]
seeds: [{", ".join(str(s) for s in range(seeds))}]
""")
    return path


def write_store(sweep, root: Path) -> dict[str, JobState]:
    """The store of the sweep mid-way; returns what the fake squeue answers."""
    queue: dict[str, JobState] = {}
    sft = sweep.runs[0].sft_id
    write_json(done_path(root, "sft", sft), {"stage": "sft", "id": sft})
    now = time.time()
    for i, run in enumerate(sweep.runs):
        kind = i % 10
        rl_dir = stage_dir(root, "rl", run.run_id)
        rl_dir.mkdir(parents=True, exist_ok=True)
        if kind < 7:  # done or running: a live file
            live = LiveFile(rl_dir, "rl", run.run_id, total=100, every_s=0.0, clock=lambda: now)
            live.update(100 if kind < 4 else 37, {"reward": 0.5, "entropy": 0.7, "loss": 0.1})
        if kind < 4:
            write_json(rl_dir / "DONE.json", {"stage": "rl", "id": run.run_id})
            for step, group in run.eval_jobs:
                write_json(done_path(root, "eval", run.eval_id, run.run_id, step, group),
                           {"stage": "eval", "step": step, "scores": {"arithmetic": 0.5}})
        elif kind < 7:
            (rl_dir / LOCK_NAME).write_text(json.dumps({"host": f"gpu{i % 64}", "pid": 1}))
            write_rows(root, "runs", runs_file("rl", run.run_id), [{"run_id": run.run_id, "sweep": sweep.name,
                                                                   "stage": "rl", "status": "running"}])
        elif kind == 7:
            job = str(100000 + i)
            write_json(rl_dir / SLURM_RECORD, {"rule": "rl", "job_id": job, "log": str(rl_dir / "slurm.log")})
            queue[job] = JobState("PENDING", reason="Priority")
        elif kind == 8:
            (rl_dir / JOB_LOG).write_text(f"step 1\n{OOM}\n")
            write_rows(root, "runs", runs_file("rl", run.run_id), [{"run_id": run.run_id, "sweep": sweep.name,
                                                                   "stage": "rl", "status": "failed",
                                                                   "error": "RuntimeError: ended"}])
    return queue


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10000)
    p.add_argument("--repeat", type=int, default=6)
    p.add_argument("--every", type=float, default=5.0, help="seconds between refreshes (watch's default 5)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        sweep = load_sweep(sweep_file(tmp, a.runs))
        root = tmp / "results"
        queue = write_store(sweep, root)
        print(f"{len(sweep.runs)} runs, store written in {time.perf_counter() - t0:.0f}s", flush=True)
        calls = []
        now = [time.time()]  # watch's clock, advanced by --every between refreshes (the ETA replays on its own
        # schedule: workflow/watch/timing.py ETA_EVERY_S), so the median is what a refresh costs as `watch` runs
        watcher = Watcher(sweep, root, squeue=lambda: calls.append(1) or queue, clock=lambda: now[0])
        c0 = time.process_time()
        snap = watcher.snapshot()
        first = time.process_time() - c0
        plain(snap, max_lines=40)  # (the view itself: folded as a terminal would show it)
        refreshes = []
        for _ in range(a.repeat):
            now[0] += a.every
            c0 = time.process_time()
            snap = watcher.snapshot()
            plain(snap, max_lines=40)
            refreshes.append(time.process_time() - c0)
        done_files = [done_path(root, "sft", sweep.runs[0].sft_id)]
        for run in sweep.runs:
            done_files.append(stage_dir(root, "rl", run.run_id) / "DONE.json")
            done_files += [done_path(root, "eval", run.eval_id, run.run_id, s, g) for s, g in run.eval_jobs]
        walks = []
        for _ in range(a.repeat):
            c0 = time.process_time()
            for f in done_files:
                try:
                    os.stat(f)
                except OSError:
                    pass
            walks.append(time.process_time() - c0)
        refresh, walk = statistics.median(refreshes), statistics.median(walks)
        print(f"jobs {dict(snap.jobs)}; squeue calls: {len(calls)} in {a.repeat + 1} refreshes")
        print(f"first refresh   {first:7.3f} s CPU")
        print(f"refresh         {refresh:7.3f} s CPU   (goal <= 1 s at 10,000 runs: {'met' if refresh <= 1 else 'NOT met'}; "
              f"every {a.every:g} s, the slowest {max(refreshes):.3f} s: the ETA replayed)")
        print(f"stat walk       {walk:7.3f} s CPU   ({len(done_files)} DONE files)")
        print(f"refresh / stat walk: {refresh / walk:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
