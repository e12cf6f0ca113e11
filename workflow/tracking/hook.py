"""The job side: a training job's rows (and an evaluation job's scores) sent to the sweep's trackers as it runs.

A job never fails and never slows because of a tracker. The job's thread only queues its rows; the trackers run in a
child process of the job (child.py: a thread of the job would hold its GIL while the trackers' Python runs) through
the sending loop of sending.py, which sends each tracker what its run lacks and switches off, with one warning, a
tracker that fails. At exit the trackers get a bounded time to finish (CLOSE_S), never more. `TrackerHook` runs the
same loop in a thread of the job, for trackers made in this process (the tests' recording ones).

The trackers a job reports to are its sweep's `tracking:` block, which the Snakefile records in
results/<sweep>/tracking.json when it plans the sweep (tracking_settings below): a block that is never part of the
job's command line or identity.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import queue
import threading
from pathlib import Path
from typing import Any, Callable, Mapping

from workflow.atomic import write_text
from workflow.layout import sweep_dir
from workflow.tracking.base import Tracker, make
from workflow.tracking.child import CLOSE_S, TrackerProcess
from workflow.tracking.destinations import resolve
from workflow.tracking.runs import Point, TrackedRun
from workflow.tracking.sending import Item, print_warning, send

TRACKING_FILE = "tracking.json"
_warn = print_warning


def record_tracking(results_root: str | Path, sweep: str, tracking: dict[str, Any],
                    warn: Callable[[str], None] = _warn, environ: Mapping[str, str] | None = None) -> None:
    """The sweep's `tracking:` block (its set backends only) where its jobs find it, each unset field resolved from
    the environment or our default with its source (destinations.py), rewritten only on a change; and what each
    backend prepares before any job (Tracker.prepare). A backend that cannot prepare is a warning, never a failed
    plan: its jobs try again, and a tracker never fails a job."""
    environ = os.environ if environ is None else environ
    settings = {k: resolve(k, v, sweep, environ, warn) for k, v in tracking.items() if v is not None}
    path = sweep_dir(results_root, sweep) / TRACKING_FILE
    text = json.dumps(settings, sort_keys=True)
    try:
        unchanged = path.read_text() == text
    except OSError:
        unchanged = False
    if not unchanged:
        write_text(path, text)
    for name, backend in settings.items():
        try:
            make(name, dict(backend or {}), sweep, results_root).prepare()
        except Exception as e:  # noqa: BLE001
            warn(f"tracker {name}: not prepared ({type(e).__name__}: {str(e)[:300]}); its jobs make what it lacks")


def tracking_settings(results_root: str | Path, sweep: str) -> dict[str, Any]:
    """The backends a job of `sweep` reports to ({} when none, or the record cannot be read)."""
    try:
        found = json.loads((sweep_dir(results_root, sweep) / TRACKING_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


class TrackerHook:
    """The trackers of one tracker run, fed from a background thread of this process (trackers made here: the
    tests'; a job's are in a child process, job_hook)."""

    def __init__(self, settings: dict[str, Any], run: TrackedRun, sweep: str, results_root: str | Path,
                 warn: Callable[[str], None] = _warn, make_tracker: Callable[..., Tracker] = make):
        self.run, self.warn, self.finished = run, warn, False
        trackers = [(name, functools.partial(make_tracker, name, dict(s or {}), sweep, results_root))
                    for name, s in settings.items()]
        self.queue: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=send, args=(trackers, run, self._next, warn), name="rlsweep-trackers",
                                       daemon=True)
        self.thread.start()
        atexit.register(self.close)  # (a process that never calls close still gives its trackers CLOSE_S)

    def rows(self, rows: list[dict[str, Any]]) -> None:
        """train_steps rows, queued (the caller's cost: a queue put)."""
        self.queue.put(("train", rows))

    def points(self, points: list[Point]) -> None:
        self.queue.put(("points", points))

    def alive(self) -> bool:
        return self.thread.is_alive()

    def close(self, finished: bool = False, timeout_s: float = CLOSE_S) -> None:
        """Send what is queued (within `timeout_s`) and let go of the tracker runs; `finished`: the stage is done."""
        if self.thread.is_alive():
            self.finished = self.finished or finished
            self.queue.put(("end", self.finished))
            self.thread.join(timeout_s)
            if self.thread.is_alive():
                self.warn(f"trackers of {self.run.name}: not done after {timeout_s:.0f}s; `rlsweep track` sends "
                          "what they missed")

    def _next(self, timeout: float) -> Item | None:
        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            return None


def job_hook(results_root: str | Path, sweep: str, run: TrackedRun,
             warn: Callable[[str], None] = _warn) -> TrackerProcess | None:
    """The trackers of a job of `sweep`, in a child process (None: its sweep tracks nothing, or the child could not
    be started: one warning, and `rlsweep track` sends what the job's trackers would have)."""
    settings = tracking_settings(results_root, sweep)
    if not settings:
        return None
    try:
        return TrackerProcess(settings, run, sweep, results_root, warn=warn)
    except OSError as e:
        warn(f"trackers of {run.name} off: their process did not start ({e}); `rlsweep track` sends what they miss")
        return None

