"""A local sweep with all three trackers on, end to end: its RL job killed (-9) in its second segment and resumed. Each
training run is one tracker run (the SFT job; the segmented and resumed RL run), every step lands once with the value
of `train_steps`, the evaluations land at their steps, a second `rlsweep track` sends nothing, and the planted W&B key
and MLflow password are in no file the project wrote. (An extension's tracker run, which holds its donor's steps too,
is checked where CI already pays for an extension: tests/e2e/test_extend.py, on a compacted donor.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter

import pytest

from helpers import REPO, SNAKEMAKE, files_naming, run_cli, write_sweep
from workflow.layout import stage_dir
from workflow.live import read_live
from workflow.results.catalog import query
from workflow.runlock import LOCK_NAME
from workflow.sweep.expand import load_sweep

pytestmark = pytest.mark.slow

BASE = """
base:
  model: {n_layers: 1, hidden: 32, n_heads: 2}
  task: {n_heldout: 16}
  sft: {steps: 20, batch_size: 32, checkpoint_every: 10}
  rl: {steps: STEPS, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, checkpoint_every: 6}
  eval: {k: 2, max_new_tokens: 16, every: 12}
tracking:
  tensorboard: {}
  mlflow: {}
  wandb: {project: rlsweep-test, mode: offline}
"""
SECRETS = {"WANDB_API_KEY": "planted0wandb0key0f3a9c1d2e4b5a6978", "MLFLOW_TRACKING_PASSWORD": "planted-mlflow-pw-77c1",
           # a tracking URI holding credentials is never used, so never written (issue 82)
           "MLFLOW_TRACKING_URI": "http://planted-user:planted-uri-secret-5e2@127.0.0.1:9"}
# the trackers' other variables (issue 82): the experiment is the sweep file's to leave unset, so the environment's
# is used; the W&B block sets project and mode, which win over the environment's
PLANTED = {"MLFLOW_EXPERIMENT_NAME": "lab-experiment", "WANDB_PROJECT": "planted-project", "WANDB_MODE": "online"}


def tensorboard(root, sweep, folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(root / sweep / "tensorboard" / folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def test_one_tracker_run_per_training_run_every_step_once_and_no_secret_written(tmp_path):
    env = {**os.environ, **SECRETS, **PLANTED, "WANDB_SILENT": "true"}
    first = write_sweep(tmp_path / "tt.yaml", "tt", base=BASE.replace("STEPS", "24"))
    run = load_sweep(first).runs[0]
    root, work = tmp_path / "results", tmp_path / "work"
    cmd = [*SNAKEMAKE, "-d", str(work), "--config", f"sweep={first}", f"results={root}"]
    rl_dir = stage_dir(root, "rl", run.run_id)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 240
    # killed as soon as its second segment's first checkpoint (step 18) is there: the live file is no timer here, it
    # is written at most every 2 s, when a tiny model runs tens of steps
    while not (rl_dir / "checkpoints" / "step_000018").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the RL job never reached step 18"
        time.sleep(0.01)
    os.kill(json.loads((rl_dir / LOCK_NAME).read_text())["pid"], signal.SIGKILL)
    proc.wait(timeout=120)
    assert not (rl_dir / "DONE.json").exists(), "the RL job finished before it was killed; the test proved nothing"
    assert read_live(rl_dir)["step"] < 24
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]

    rows = query(f"SELECT step, reward, loss FROM train_steps WHERE stage = 'rl' AND run_id = '{run.run_id}'",
                 root).to_pylist()
    by_step = {r["step"]: r for r in rows}
    assert sorted(by_step) == list(range(1, 25))
    folder = f"{run.label}_{run.run_id}"
    tb = tensorboard(root, "tt", folder)
    assert Counter(s for s, _ in tb["train/reward"]) == Counter(range(1, 25)), tb["train/reward"]
    assert all(abs(v - by_step[s]["reward"]) < 1e-6 for s, v in tb["train/reward"])
    assert sorted(s for s, _ in tb["eval/arithmetic/avg_at_2"]) == [12, 24]
    from wandb_offline import history
    wandb_steps = Counter(r["step"] for r in history(root / "tt" / "wandb", f"rlsweep-rl-{run.run_id}")
                          if "train/loss" in r)
    assert wandb_steps == Counter(range(1, 25))
    from mlflow.tracking import MlflowClient
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'tt' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("lab-experiment").experiment_id])  # the environment's
    assert client.get_experiment_by_name("tt") is None
    assert sorted(r.data.tags["rlsweep_id"] for r in runs) == sorted([f"rlsweep-sft-{run.sft_id}",
                                                                      f"rlsweep-rl-{run.run_id}"])
    rl_run = next(r for r in runs if r.data.tags["rlsweep_id"] == f"rlsweep-rl-{run.run_id}")
    losses = client.get_metric_history(rl_run.info.run_id, "train/loss")
    assert Counter(m.step for m in losses) == Counter(range(1, 25)) and rl_run.info.status == "FINISHED"
    # the trackers hold everything: a second backfill sends nothing
    out = run_cli("--results", str(root), "track", str(first), env=SECRETS)  # (PLANTED unset: the record decides)
    assert out.returncode == 0 and out.stderr.count(" 0 points sent") == 3, out.stderr
    # nothing under results/ names this machine's paths (issue 80): MLflow's artifact location is its own scheme,
    # not `<cwd>/mlruns`; W&B's offline folder is W&B's own record of the run (its program, host and directory)
    assert files_naming(root, tmp_path, REPO, skip=("wandb",)) == []
    experiment = client.get_experiment_by_name("lab-experiment")
    assert experiment.artifact_location.startswith("mlflow-artifacts:/") and rl_run.info.artifact_uri.startswith(
        "mlflow-artifacts:/")
    # no file anywhere the project wrote holds a planted secret
    for path in [p for p in tmp_path.rglob("*") if p.is_file()]:
        data = path.read_bytes()
        assert not any(s.encode() in data for s in SECRETS.values()), path
