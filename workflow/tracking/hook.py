"""The job side: a training job's rows (and an evaluation job's scores) sent to the sweep's trackers as it runs.

A job never fails and never slows because of a tracker. The job's thread only queues its rows; one background
thread opens each tracker, asks what the tracker run already holds (a resumed job, the next segment, an evaluation
that finished earlier), and sends what is missing. Any tracker error (no network, a bad key, a server that is down, a
full disk) prints one warning naming the tracker and switches that tracker off for the rest of the job; the next
`rlsweep track` (a sweep's last job runs it) sends what it missed. At exit the thread gets a bounded time to finish
(CLOSE_S), never more.

The trackers a job reports to are its sweep's `tracking:` block, which the Snakefile records in
results/<sweep>/tracking.json when it plans the sweep (tracking_settings below): a block that is never part of the
job's command line or identity.
"""

from __future__ import annotations

import atexit
import json
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from workflow.atomic import write_text
from workflow.layout import sweep_dir
from workflow.tracking.base import Tracker, make
from workflow.tracking.runs import Point, TrackedRun, train_points

CLOSE_S = 30.0  # how long a finishing job waits for its trackers at most
SEND_EVERY_S = 5.0  # how often the queued rows go out (and once more at the end)
TRACKING_FILE = "tracking.json"


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def record_tracking(results_root: str | Path, sweep: str, tracking: dict[str, Any],
                    warn: Callable[[str], None] = _warn) -> None:
    """The sweep's `tracking:` block (its set backends only) where its jobs find it, rewritten only on a change; and
    what each backend prepares before any job (Tracker.prepare). A backend that cannot prepare is a warning, never a
    failed plan: its jobs try again, and a tracker never fails a job."""
    settings = {k: v for k, v in tracking.items() if v is not None}
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
    """The trackers of one tracker run, fed from a background thread."""

    def __init__(self, settings: dict[str, Any], run: TrackedRun, sweep: str, results_root: str | Path,
                 warn: Callable[[str], None] = _warn, make_tracker: Callable[..., Tracker] = make):
        self.run, self.warn = run, warn
        self.trackers = [(name, make_tracker, dict(s or {})) for name, s in settings.items()]
        self.sweep, self.results_root = sweep, results_root
        self.queue: queue.Queue = queue.Queue()
        self.finished = False
        self.thread = threading.Thread(target=self._work, name="rlsweep-trackers", daemon=True)
        self.thread.start()
        atexit.register(self.close)  # (a process that never calls close still gives its trackers CLOSE_S)

    # ------------------------------------------------------------------------------------- the job's thread
    def rows(self, rows: list[dict[str, Any]]) -> None:
        """train_steps rows, queued (the caller's cost: a queue put)."""
        self.queue.put(("train", rows))

    def points(self, points: list[Point]) -> None:
        self.queue.put(("points", points))

    def close(self, finished: bool = False, timeout_s: float = CLOSE_S) -> None:
        """Send what is queued (within `timeout_s`) and let go of the tracker runs; `finished`: the stage is done."""
        if self.thread.is_alive():
            self.finished = self.finished or finished
            self.queue.put(None)
            self.thread.join(timeout_s)
            if self.thread.is_alive():
                self.warn(f"trackers of {self.run.name}: not done after {timeout_s:.0f}s; `rlsweep track` sends "
                          "what they missed")

    # ---------------------------------------------------------------------------------- the background thread
    def _work(self) -> None:
        open_ = []
        for name, make_tracker, settings in self.trackers:
            try:
                tracker = make_tracker(name, settings, self.sweep, self.results_root)
                tracker.open(self.run)
                open_.append((name, tracker, tracker.logged()))
            except Exception as e:  # noqa: BLE001 - a tracker never fails the job
                self.warn(f"tracker {name} off for {self.run.name}: {type(e).__name__}: {str(e)[:300]}")
        done, items, last = False, [], time.monotonic()
        while not done:
            # rows are sent every SEND_EVERY_S (and at the end), not each step: a tracker's call (an SQLite commit,
            # a W&B record, a flushed events file) costs about the same for one row as for a hundred
            try:
                item = self.queue.get(timeout=max(0.0, last + SEND_EVERY_S - time.monotonic()))
            except queue.Empty:
                item = ()
            done = item is None
            if item:
                items.append(item)
            if not items or (not done and time.monotonic() - last < SEND_EVERY_S):
                continue
            last = time.monotonic()
            points = [p for kind, payload in items for p in (train_points(payload) if kind == "train" else payload)]
            items = []
            for entry in list(open_):
                name, tracker, held = entry
                fresh = [p for p in points if (p.key, p.step) not in held]
                if not fresh:
                    continue
                try:
                    tracker.log(fresh)
                    held.update((p.key, p.step) for p in fresh)
                except Exception as e:  # noqa: BLE001
                    self.warn(f"tracker {name} off for {self.run.name}: {type(e).__name__}: {str(e)[:300]}")
                    open_.remove(entry)
        for name, tracker, _ in open_:
            try:
                tracker.close(self.finished)
            except Exception as e:  # noqa: BLE001
                self.warn(f"tracker {name}: closing {self.run.name}: {type(e).__name__}: {str(e)[:300]}")


def job_hook(results_root: str | Path, sweep: str, run: TrackedRun) -> TrackerHook | None:
    """The hook of a job of `sweep` (None: its sweep tracks nothing)."""
    settings = tracking_settings(results_root, sweep)
    return TrackerHook(settings, run, sweep, results_root) if settings else None

