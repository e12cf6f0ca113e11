"""MLflow: one MLflow run per training run in one experiment (`tracking.mlflow.experiment`, default the sweep's
name), found again by its `rlsweep_id` tag; the tracking URI is `tracking.mlflow.uri`, default a SQLite database
results/<sweep>/mlflow.db. Needs mlflow-skinny (and SQLAlchemy and Alembic for a database URI), not the full server
package. Credentials come from MLFLOW_TRACKING_USERNAME / _PASSWORD / _TOKEN, never the sweep file."""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import quote

from workflow.layout import sweep_dir
from workflow.tracking.base import Tracker
from workflow.tracking.runs import Point, TrackedRun

ID_TAG = "rlsweep_id"
# where an experiment's artifacts would go. rlsweep logs none, but MLflow records a location per experiment and run,
# and a local path it makes absolute (`<cwd>/mlruns/...`): a machine path in results/, pointing at nothing once the
# results are copied. `mlflow-artifacts:/` is MLflow's own scheme for "the server's artifact store": no path, and a
# `mlflow ui --backend-store-uri sqlite:///results/<sweep>/mlflow.db` serves it from wherever that runs.
ARTIFACTS = "mlflow-artifacts:/"
BATCH = 1000  # MLflow's limit of metrics per log_batch
PARAM_CHARS = 6000  # and of a parameter's value


class MLflowTracker(Tracker):
    name = "mlflow"

    def uri(self) -> str:
        if self.settings.get("uri"):
            return self.settings["uri"]
        return f"sqlite:///{self._default_db().resolve()}"

    def _default_db(self) -> Path:
        return sweep_dir(self.results_root, self.sweep) / "mlflow.db"

    def prepare(self) -> None:
        """The default SQLite store made before any job opens it: MLflow makes a missing one by running its Alembic
        migrations (3 s of CPU, ~13 s on 2 busy cores, in the job's first steps), and two jobs starting at once (an
        SFT job beside the step-0 evaluation) would both run them on one file. Made under a temporary name and
        linked into place, so a planner beside this one finds either no store or a whole one. A URI of the sweep's
        (a server, or a database of its own) is left to its owner."""
        if self.settings.get("uri") or self._default_db().is_file():
            return
        db = self._default_db()
        db.parent.mkdir(parents=True, exist_ok=True)
        tmp = db.with_name(f".{db.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        try:
            from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
            # (made so: its Default experiment gets the artifact location above, not the working directory's)
            SqlAlchemyStore(f"sqlite:///{tmp.resolve()}", ARTIFACTS).search_experiments(max_results=1)  # migrates
            try:
                os.link(tmp, db)  # never over a store another planner linked first
            except FileExistsError:
                pass
        finally:
            tmp.unlink(missing_ok=True)

    def open(self, run: TrackedRun) -> None:
        """Find the run (nothing is created until there is something to log)."""
        from mlflow.tracking import MlflowClient
        if not self.settings.get("uri"):
            sweep_dir(self.results_root, self.sweep).mkdir(parents=True, exist_ok=True)
        self.run, self.client, self.ready = run, MlflowClient(tracking_uri=self.uri()), False
        self.experiment = self.settings.get("experiment") or self.sweep  # (resolved when planned: destinations.py)
        found = self.client.get_experiment_by_name(self.experiment)
        self.experiment_id = found.experiment_id if found is not None else None
        runs = (self.client.search_runs([self.experiment_id], filter_string=f"tags.{ID_TAG} = '{run.key}'",
                                        max_results=1) if self.experiment_id is not None else [])
        self.found = runs[0] if runs else None
        self.run_id = self.found.info.run_id if self.found else None

    def _ready(self) -> None:
        """The experiment and the run made if they are not there; its name, tags and missing settings set."""
        from mlflow.entities import Param
        client, run = self.client, self.run
        if self.experiment_id is None:
            try:
                self.experiment_id = client.create_experiment(
                    self.experiment, artifact_location=ARTIFACTS + quote(self.experiment, safe=""))
            except Exception:  # noqa: BLE001 - another job created it meanwhile
                self.experiment_id = client.get_experiment_by_name(self.experiment).experiment_id
        tags = {"rlsweep_stage": run.stage, "rlsweep_group": run.group, **{f"rlsweep_tag.{t}": "1" for t in run.tags}}
        if self.found is None:
            self.run_id = client.create_run(self.experiment_id, run_name=run.name,
                                            tags={ID_TAG: run.key, **tags}).info.run_id
            held_params = {}
        else:
            if run.seed is not None or run.stage != "rl":  # (opened first by an evaluation, which knew no seed)
                tags["mlflow.runName"] = run.name
            for k, v in tags.items():
                if self.found.data.tags.get(k) != v:
                    client.set_tag(self.run_id, k, v)
            held_params = self.found.data.params
        # the settings it lacks (a run an evaluation job made first has none: the training job adds them); MLflow
        # refuses to change a parameter, and a run's settings never change
        params = [Param(k[:250], str(v)[:PARAM_CHARS]) for k, v in sorted(run.config.items())
                  if k[:250] not in held_params]
        for i in range(0, len(params), 100):
            client.log_batch(self.run_id, params=params[i:i + 100])
        self.ready = True

    def logged(self) -> set[tuple[str, int]]:
        if self.run_id is None:
            return set()
        keys = self.client.get_run(self.run_id).data.metrics
        return {(k, m.step) for k in keys for m in self.client.get_metric_history(self.run_id, k)}

    def log(self, points: list[Point]) -> None:
        from mlflow.entities import Metric
        if not self.ready:
            self._ready()
        now = int(time.time() * 1000)
        metrics = [Metric(p.key, p.value, now, p.step) for p in points]
        for i in range(0, len(metrics), BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[i:i + BATCH])

    def close(self, finished: bool = False) -> None:
        if finished and self.run_id is not None:
            self.client.set_terminated(self.run_id, "FINISHED")
