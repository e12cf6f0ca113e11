"""MLflow through a real `mlflow server` on a SQLite backend (what a lab runs), read back with MlflowClient: a run
logged by one process and continued by another is one MLflow run, every step once."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from helpers import stop_group
from workflow.tracking.base import make
from workflow.tracking.runs import TrackedRun, train_points

pytestmark = pytest.mark.slow

RUN = TrackedRun("rl", "0123456789ab", "rl.update=gxpo", 2, {"rl.update": "gxpo"}, ("s",))
ROWS = [{"step": s, "reward": s / 8} for s in range(1, 9)]
SERVERS: dict[str, subprocess.Popen] = {}


@pytest.fixture
def server(tmp_path):
    mlflow = shutil.which("mlflow", path=str(Path(sys.executable).parent)) or shutil.which("mlflow")
    if mlflow is None:
        pytest.skip("needs mlflow (./scripts/setup.sh installs it)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([mlflow, "server", "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
                             "--artifacts-destination", str(tmp_path / "artifacts"), "--host", "127.0.0.1",
                             "--port", str(port), "--workers", "1"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            # no job runner (huey): the tracker logs runs and metrics only, and mlflow's runner left
                            # an empty /dev/shm/tmp* folder after every test session
                            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
    while True:
        try:
            if urllib.request.urlopen(f"{url}/health", timeout=2).read() == b"OK":
                break
        except OSError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "mlflow server did not come up"
        time.sleep(0.5)
    SERVERS[url] = proc  # (a test that kills it)
    yield url
    if proc.poll() is None:
        stop_group(proc, grace_s=20)


def test_two_processes_one_run_every_step_once_through_a_real_server(server, tmp_path):
    settings = {"uri": server, "experiment": "lab"}
    for part in (ROWS[:5], ROWS[3:]):  # the second process (a resumed job) repeats steps 4 and 5
        tracker = make("mlflow", settings, "s", tmp_path)
        tracker.open(RUN)
        held = tracker.logged()
        tracker.log([p for p in train_points(part) if (p.key, p.step) not in held])
        tracker.close(finished=part is not ROWS[:5])
    from mlflow.tracking import MlflowClient
    client = MlflowClient(tracking_uri=server)
    runs = client.search_runs([client.get_experiment_by_name("lab").experiment_id])
    assert len(runs) == 1 and runs[0].data.tags["rlsweep_id"] == RUN.key and runs[0].info.status == "FINISHED"
    history = client.get_metric_history(runs[0].info.run_id, "train/reward")
    assert Counter(m.step for m in history) == Counter(range(1, 9))
    assert all(m.value == m.step / 8 for m in history)
    assert not (tmp_path / "s" / "mlflow.db").exists()  # the server's database, not a local one


def test_a_server_killed_mid_sweep_holds_the_backfill_up_for_less_than_a_minute(server, tmp_path, monkeypatch):
    """Issue 82, item 7: the aggregate stage's backfill (and `rlsweep track`) to an MLflow server that was killed: its
    first request fails within the bound (bounds.py: one retry, a 10 s timeout), the tracker is off for the rest of
    the call with one line, and six training runs cost one failed request, not six (MLflow's defaults: ~4 min each).
    The runs already sent stay; the next call, with the server back, would send the rest."""
    import json

    from helpers import write_sweep
    from workflow.results.membership import record
    from workflow.results.train_log import TrainLog
    from workflow.results.writer import write_rows
    from workflow.layout import runs_file
    from workflow.sweep.expand import load_sweep
    from workflow.tracking import bounds
    from workflow.tracking.backfill import track
    for name in bounds.BOUNDS:  # the test's own environment sets none of them: the bounds apply
        monkeypatch.delenv(name, raising=False)
    sweep = load_sweep(write_sweep(tmp_path / "k.yaml", "k", "grid:\n  rl.update: [grpo, sfpo, gxpo]\nseeds: [0, 1]\n"))
    root = tmp_path / "results"
    record(root, "k", sweep.members())
    for run in sweep.runs:
        write_rows(root, "runs", runs_file("rl", run.run_id), [{
            "run_id": run.run_id, "sweep": "k", "stage": "rl", "status": "completed", "label": run.label,
            "seed": run.config.seed, "method": run.method, "config": json.dumps(run.stage_config("rl"))}])
        log = TrainLog(root, "k", "rl", run.run_id)
        for step in (1, 2):
            log.record(step=step, reward=step / 2, loss=1.0)
        log.flush()
    settings = {"mlflow": {"uri": server, "experiment": "lab"}}
    said = []
    [first] = track(root, "k", settings, planned=sweep.members(), say=said.append)  # the server is up
    assert (first.runs, first.off) == (6, False)
    for run in sweep.runs:  # more steps while the server dies
        log = TrainLog(root, "k", "rl", run.run_id)
        log.record(step=3, reward=1.0, loss=1.0)
        log.flush()
    import signal
    os.killpg(SERVERS[server].pid, signal.SIGKILL)  # the server and its workers, without a word
    SERVERS[server].wait()
    start = time.monotonic()
    [down] = track(root, "k", settings, planned=sweep.members(), say=said.append)
    waited = time.monotonic() - start
    assert waited < 60, f"the backfill waited {waited:.0f} s for a dead server"
    assert down.off and len(down.errors) == 1 and down.runs == 0
    assert "off after a failure" in said[-1] and "the next `rlsweep track` sends the rest" in said[-1]
