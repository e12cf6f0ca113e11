"""Weights & Biases: one W&B run per training run, its W&B id the run's key, so every process that logs to it
resumes it (`resume="allow"`). Points are logged against our own step axis (`step`, every key's step metric): W&B's
internal step only increases, so an evaluation finished after later training steps, or a resumed job's first steps,
would otherwise be dropped. Offline mode writes under results/<sweep>/wandb/ for `wandb sync` later (one directory per
process, offline-run-<time>-<id>, with -1, -2, ... after it for more processes of the run started in the same
second, as a job's trackers and an evaluation job's may be; `wandb sync` uploads a run's directories in order).
The API key comes from WANDB_API_KEY or `wandb login`.

W&B has no read-back for an offline run, so what was sent to each run is kept beside it: results/<sweep>/wandb/
rlsweep-sent/<key>.json, the (key, step) points, rewritten after each log call returns."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from workflow.atomic import write_text
from workflow.layout import sweep_dir
from workflow.tracking.base import Tracker
from workflow.tracking.runs import Point, TrackedRun

STEP = "step"


class WandbTracker(Tracker):
    name = "wandb"

    def open(self, run: TrackedRun) -> None:
        """Read what was sent (W&B's run is started only when there is something to log)."""
        self.home = sweep_dir(self.results_root, self.sweep)
        self.track, self.run = run, None
        self.sent_file = self.home / "wandb" / "rlsweep-sent" / f"{run.key}.json"
        self.sent = self._read_sent()

    def _start(self) -> None:
        import wandb
        run = self.track
        (self.home / "wandb").mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(console="off", silent=True, disable_git=True, disable_code=True,
                                  x_disable_stats=True, x_disable_meta=True, init_timeout=60)
        # project, mode and dir as resolved when the sweep was planned (destinations.py: the sweep file, the
        # environment, our default), passed explicitly so that no job's own environment sends elsewhere
        where = Path(self.settings.get("dir") or self.home)
        where.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=self.settings.get("project") or self.sweep, entity=self.settings.get("entity"),
                              id=run.key, name=run.name if run.seed is not None or run.stage != "rl" else None,
                              group=run.group, tags=list(run.tags), config=run.config,
                              resume="allow", mode=self.settings.get("mode") or "online", dir=str(where),
                              reinit="create_new", settings=settings)
        self.run.define_metric(STEP)
        self.run.define_metric("*", step_metric=STEP)

    def _read_sent(self) -> set[tuple[str, int]]:
        try:
            return {(k, int(s)) for k, s in json.loads(Path(self.sent_file).read_text())}
        except (OSError, ValueError, TypeError):
            return set()

    def logged(self) -> set[tuple[str, int]]:
        return set(self.sent)

    def log(self, points: list[Point]) -> None:
        if self.run is None:
            self._start()
        by_step: dict[int, dict[str, float]] = defaultdict(dict)
        for p in points:
            by_step[p.step][p.key] = p.value
        for step in sorted(by_step):
            self.run.log({STEP: step, **by_step[step]})
        self.sent.update((p.key, p.step) for p in points)
        write_text(self.sent_file, json.dumps(sorted(self.sent)))

    def close(self, finished: bool = False) -> None:
        if self.run is not None:
            self.run.finish()
