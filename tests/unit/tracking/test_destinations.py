"""Issue 82, item 1: where each tracker sends. A block's unset field takes the ecosystem's variable (MLflow's tracking
URI and experiment, W&B's project, mode and dir), else our default; the sweep file wins over the environment. It is
resolved once where the sweep is planned and recorded with its source, so every job sends to one place; runs land
where the environment said; and no credential is ever used from a URI or written."""

from __future__ import annotations

import json

from workflow.layout import sweep_dir
from workflow.tracking.base import make
from workflow.tracking.destinations import SOURCES, resolve
from workflow.tracking.hook import TRACKING_FILE, record_tracking, tracking_settings
from workflow.tracking.runs import TrackedRun, train_points

RUN = TrackedRun("rl", "0123456789ab", "rl.update=sfpo", 1, {"rl.update": "sfpo"}, ())
ROWS = [{"step": s, "loss": 1.0 / s} for s in (1, 2)]


def test_the_sweep_file_then_the_environment_then_our_default():
    env = {"MLFLOW_TRACKING_URI": "http://mlflow.lab:5000", "MLFLOW_EXPERIMENT_NAME": "lab",
           "WANDB_PROJECT": "lab-project", "WANDB_MODE": "dryrun"}
    mlflow = resolve("mlflow", {"experiment": "mine"}, "s", env)
    assert (mlflow["uri"], mlflow["experiment"]) == ("http://mlflow.lab:5000", "mine")
    assert mlflow[SOURCES] == {"uri": "the environment: MLFLOW_TRACKING_URI", "experiment": "the sweep file"}
    wandb = resolve("wandb", {}, "s", env)
    assert (wandb["project"], wandb["mode"], wandb["dir"]) == ("lab-project", "offline", None)  # dryrun: offline
    assert wandb[SOURCES]["dir"].startswith("default")
    bare = resolve("wandb", {}, "s", {})
    assert (bare["project"], bare["mode"]) == ("s", "online")  # no project anywhere: the sweep's name


def test_a_uri_holding_credentials_is_not_used_and_never_written(tmp_path):
    warned = []
    env = {"MLFLOW_TRACKING_URI": "https://lab:hunter2-planted@mlflow.lab", "MLFLOW_TRACKING_PASSWORD": "pw-planted"}
    record_tracking(tmp_path, "s", {"mlflow": {}}, warn=warned.append, environ=env)
    text = (sweep_dir(tmp_path, "s") / TRACKING_FILE).read_text()
    assert "hunter2-planted" not in text and "pw-planted" not in text
    assert tracking_settings(tmp_path, "s")["mlflow"]["uri"] is None  # the default database
    assert any("holds credentials" in w and "hunter2" not in w for w in warned)


def test_mlflow_runs_land_where_the_environment_recorded_at_planning_says(tmp_path, monkeypatch):
    elsewhere = tmp_path / "lab.db"
    record_tracking(tmp_path / "results", "s", {"mlflow": {}}, environ={
        "MLFLOW_TRACKING_URI": f"sqlite:///{elsewhere}", "MLFLOW_EXPERIMENT_NAME": "lab"})
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'job-env.db'}")  # a job's own: not followed
    settings = tracking_settings(tmp_path / "results", "s")["mlflow"]
    tracker = make("mlflow", settings, "s", tmp_path / "results")
    tracker.open(RUN)
    tracker.log(train_points(ROWS))
    tracker.close(finished=True)
    from mlflow.tracking import MlflowClient
    client = MlflowClient(tracking_uri=f"sqlite:///{elsewhere}")
    [run] = client.search_runs([client.get_experiment_by_name("lab").experiment_id])
    assert run.data.tags["rlsweep_id"] == RUN.key and not (tmp_path / "job-env.db").exists()
    assert not (sweep_dir(tmp_path / "results", "s") / "mlflow.db").exists()


def test_wandb_writes_where_the_environment_says_unless_the_sweep_file_says(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    lab = tmp_path / "scratch"
    env = {"WANDB_PROJECT": "lab-project", "WANDB_MODE": "offline", "WANDB_DIR": str(lab)}
    record_tracking(tmp_path / "results", "s", {"wandb": {"project": "mine"}}, environ=env)
    settings = tracking_settings(tmp_path / "results", "s")["wandb"]
    assert (settings["project"], settings["mode"], settings["dir"]) == ("mine", "offline", str(lab))
    assert json.loads((sweep_dir(tmp_path / "results", "s") / TRACKING_FILE).read_text())["wandb"][SOURCES] == {
        "project": "the sweep file", "mode": "the environment: WANDB_MODE", "dir": "the environment: WANDB_DIR"}
    tracker = make("wandb", settings, "s", tmp_path / "results")
    tracker.open(RUN)
    tracker.log(train_points(ROWS))
    assert tracker.run.project == "mine"
    tracker.close(finished=True)
    assert list((lab / "wandb").glob("offline-run-*"))  # W&B's files in WANDB_DIR, not under results/
    assert not list((sweep_dir(tmp_path / "results", "s") / "wandb").glob("offline-run-*"))
