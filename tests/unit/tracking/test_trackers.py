"""The three trackers with their real libraries: what a job logs, a resumed job continues without logging a step
twice, and each library's own reader sees every step once with the values of `train_steps`."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from workflow.tracking.base import make
from workflow.tracking.runs import TrackedRun, eval_points, train_points

RUN = TrackedRun("rl", "0123456789ab", "rl.update=sfpo", 1, {"rl.lr": 1e-4, "rl.update": "sfpo"}, ("t", "sfpo"))
ROWS = [{"step": s, "loss": 1.0 / s, "reward": s / 10, "entropy": 2.0 - s / 10, "gate_tripped": s % 2 == 0,
         "note": "text is no metric"} for s in range(1, 7)]
SCORES = [{"benchmark": "arithmetic", "step": 6, "k": 1, "avg_at_k": 0.25, "pass_at_k": 0.25},
          {"benchmark": "arithmetic", "step": 6, "k": 4, "avg_at_k": 0.25, "pass_at_k": 0.5}]
SETTINGS = {"tensorboard": {}, "mlflow": {}, "wandb": {"project": "rlsweep-test", "mode": "offline"}}


def test_rows_and_scores_become_points_at_their_steps():
    points = {(p.key, p.step): p.value for p in train_points(ROWS[:2])}
    assert points == {("train/loss", 1): 1.0, ("train/reward", 1): 0.1, ("train/entropy", 1): 1.9,
                      ("train/gate_tripped", 1): 0.0, ("train/loss", 2): 0.5, ("train/reward", 2): 0.2,
                      ("train/entropy", 2): 1.8, ("train/gate_tripped", 2): 1.0}
    assert {(p.key, p.step, p.value) for p in eval_points(SCORES)} == {
        ("eval/arithmetic/avg_at_4", 6, 0.25), ("eval/arithmetic/pass_at_4", 6, 0.5)}
    # the run's id is the stage job's content id, whoever opens it
    assert RUN.key == "rlsweep-rl-0123456789ab"
    assert TrackedRun("rl", "0123456789ab", "rl.update=sfpo", None).folder == RUN.folder


def read_back(backend: str, root) -> dict[str, list[tuple[int, float]]]:
    """key -> [(step, value), ...] as the backend's own reader gives them (every point, duplicates included)."""
    if backend == "tensorboard":
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        acc = EventAccumulator(str(root / "s" / "tensorboard" / RUN.folder), size_guidance={"scalars": 0})
        acc.Reload()
        return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}
    if backend == "mlflow":
        from mlflow.tracking import MlflowClient
        client = MlflowClient(tracking_uri=f"sqlite:///{root / 's' / 'mlflow.db'}")
        runs = client.search_runs([client.get_experiment_by_name("s").experiment_id])
        assert [r.data.tags["rlsweep_id"] for r in runs] == [RUN.key]  # one MLflow run, found by its id
        assert runs[0].data.params["rl.update"] == "sfpo" and runs[0].info.run_name == RUN.name
        return {k: [(m.step, m.value) for m in client.get_metric_history(runs[0].info.run_id, k)]
                for k in runs[0].data.metrics}
    import wandb
    from wandb_offline import history
    # The transaction logs are wandb-core's to close: once, under CI's load, a read straight after finish() found
    # only the first process's rows (not reproduced on a quiet or a loaded machine since). Tearing the service
    # down waits for it to close every file, as a job's exit does, so the read sees what a `wandb sync` would.
    wandb.teardown()
    out: dict[str, list] = {}
    for row in history(root / "s" / "wandb", RUN.key):
        for k, v in row.items():
            if not k.startswith("_") and k != "step":
                out.setdefault(k, []).append((row["step"], v))
    return out


@pytest.mark.parametrize("backend", sorted(SETTINGS))
def test_a_resumed_job_continues_the_run_and_no_step_lands_twice(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    first = make(backend, SETTINGS[backend], "s", tmp_path)
    first.open(RUN)
    assert first.logged() == set()
    first.log(train_points(ROWS[:4]))
    first.close()
    again = make(backend, SETTINGS[backend], "s", tmp_path)  # the resumed job: steps 3 and 4 come again
    again.open(RUN)
    held = again.logged()
    assert {s for _, s in held} == {1, 2, 3, 4}
    again.log([p for p in train_points(ROWS[2:]) + eval_points(SCORES) if (p.key, p.step) not in held])
    again.close(finished=True)
    found = read_back(backend, tmp_path)
    # what a failure prints beside the steps: W&B's offline directories and the size of each one's log
    there = sorted((d.name, sum(f.stat().st_size for f in d.glob("*.wandb")))
                   for d in (tmp_path / "s" / "wandb").glob("offline-run-*"))
    for key in ("train/loss", "train/reward", "train/entropy", "train/gate_tripped"):
        steps = Counter(s for s, _ in found[key])
        assert steps == Counter(range(1, 7)), (key, found[key], there)  # every step, once
        column = key.split("/")[1]
        assert all(math.isclose(v, float(ROWS[s - 1][column]), rel_tol=1e-6) for s, v in found[key])
    assert found["eval/arithmetic/pass_at_4"] == [(6, 0.5)]


def test_planning_a_sweep_makes_its_mlflow_store_once_and_leaves_a_sweeps_own_uri_alone(tmp_path, monkeypatch):
    """The Snakefile's record_tracking makes the default SQLite store before any job opens it (else the jobs that
    start together each run MLflow's migrations on one file); planned again, the store is left as it is; a job opens
    it as it finds it. A sweep's own URI (a server) is its owner's: nothing is made, nothing is contacted."""
    from mlflow.tracking import MlflowClient

    from workflow.tracking.hook import record_tracking
    monkeypatch.chdir(tmp_path)  # (MLflow's default artifact root is relative: nothing may land in the cwd either)
    db = tmp_path / "r" / "s" / "mlflow.db"
    record_tracking(tmp_path / "r", "s", {"mlflow": {}, "tensorboard": {}})
    assert sorted(p.name for p in db.parent.iterdir()) == ["mlflow.db", "tracking.json"]  # no temporary left
    made = db.stat().st_mtime_ns, db.stat().st_ino
    assert MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()  # MLflow's own tables, its default
    record_tracking(tmp_path / "r", "s", {"mlflow": {}, "tensorboard": {}})
    assert (db.stat().st_mtime_ns, db.stat().st_ino) == made
    warned = []
    record_tracking(tmp_path / "r", "t", {"mlflow": {"uri": "http://127.0.0.1:9"}}, warn=warned.append)
    assert warned == [] and not (tmp_path / "r" / "t" / "mlflow.db").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]
    tracker = make("mlflow", {}, "s", tmp_path / "r")
    tracker.open(RUN)
    tracker.log(train_points(ROWS[:1]))
    assert db.stat().st_ino == made[1]  # the job used the planned store
