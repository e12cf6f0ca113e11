#!/usr/bin/env python3
"""Do Optuna trials keep their slots busy, next to lock-step batches of the same trials?

Runs a tiny study whose trials differ in length (a grid over rl.steps 4 / 600 x rule x lr: short and long trials) with
`in_flight` slots through `snakemake`, then, from the trials' own start/end times in the study storage, prints:
  - slot utilisation of the run: trial-seconds / (in_flight x study wall time);
  - the wall time lock-step batches of in_flight trials would have taken with the same measured trial durations
    (each batch waits for its slowest trial: what Hydra's Optuna sweeper does), and its ratio to ours;
  - the driver's overhead: the gap between a trial ending and the next one being asked.

    python bench/study_in_flight.py [--trials 12] [--in-flight 2]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import yaml

REPO = Path(__file__).resolve().parent.parent
BASE = {"model": {"n_layers": 1, "hidden": 32, "n_heads": 2}, "task": {"n_heldout": 16},
        "sft": {"steps": 20, "batch_size": 32, "checkpoint_every": 10},
        "rl": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 16, "checkpoint_every": 2},
        "eval": {"k": 2, "max_new_tokens": 16}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--in-flight", type=int, default=2)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sweep = Path(tmp) / "bench_study.yaml"
        sweep.write_text(yaml.safe_dump({"name": "bench_study", "base": BASE, "optuna": {
            "objective": {"sql": "SELECT run_id, avg(entropy) AS value FROM train_steps GROUP BY run_id"},
            # the grid sampler walks every (length, rule) pair once in shuffled order: short and long trials mixed
            "sampler": {"name": "grid", "seed": 0}, "n_trials": a.trials, "in_flight": a.in_flight,
            "space": {"rl.steps": {"type": "categorical", "choices": [4, 600]},
                      "rl.update": {"type": "categorical", "choices": ["grpo", "sfpo", "gxpo"]},
                      "rl.lr": {"type": "categorical", "choices": [1e-4, 3e-4]}}}}, sort_keys=False))
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores",
                              str(a.in_flight), "--config", f"sweep={sweep}"], cwd=tmp, capture_output=True,
                             text=True)
        wall = time.perf_counter() - t0
        if res.returncode:
            sys.exit(res.stderr[-3000:])
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        from optuna.storages.journal import JournalFileBackend, JournalStorage
        study = optuna.load_study(study_name="bench_study", storage=JournalStorage(JournalFileBackend(
            str(Path(tmp) / "results" / "bench_study" / "optuna.journal"))))
        trials = sorted(study.trials, key=lambda t: t.number)
    spans = [(t.datetime_start, t.datetime_complete) for t in trials]
    durations = [(e - s).total_seconds() for s, e in spans]
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    study_wall = (last - first).total_seconds()
    busy = sum(durations)
    lockstep = sum(max(durations[i:i + a.in_flight]) for i in range(0, len(durations), a.in_flight))
    gaps = [min((s - e).total_seconds() for e in (e for _, e in spans) if e <= s)
            for s, _ in spans[a.in_flight:] if any(e <= s for _, e in spans)]
    print("trials (rl.steps: seconds):", " ".join(f"{t.params['rl.steps']}:{d:.1f}" for t, d in zip(trials, durations)))
    print(f"{a.trials} trials, {a.in_flight} in flight; trial durations {min(durations):.1f}-{max(durations):.1f} s "
          f"(median {statistics.median(durations):.1f} s); snakemake total {wall:.1f} s incl. the shared SFT job")
    print(f"  ours:      trials from first ask to last tell {study_wall:.1f} s, slot utilisation "
          f"{busy / (a.in_flight * study_wall):.0%}")
    print(f"  lock-step: {lockstep:.1f} s for the same durations in batches of {a.in_flight} "
          f"({lockstep / study_wall:.2f}x ours), utilisation {busy / (a.in_flight * lockstep):.0%}")
    if gaps:
        print(f"  a trial is asked {statistics.median(gaps):.2f} s (median, max {max(gaps):.2f} s) after a slot frees")


if __name__ == "__main__":
    main()
