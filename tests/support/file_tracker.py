"""A tracker for the tests of the trackers' child process (workflow/tracking/child.py): it lives in that process,
so it reports through files. Settings: `file` (JSON lines: what it was sent, and its close), `fail` ("open" or
"log": that call raises), `hang` (log() sleeps this long)."""

from __future__ import annotations

import json
import os
import time

from workflow.tracking.base import Tracker


class FileTracker(Tracker):
    def _write(self, **what) -> None:
        with open(self.settings["file"], "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "nice": os.getpriority(os.PRIO_PROCESS, 0), **what}) + "\n")

    def open(self, run):
        if self.settings.get("fail") == "open":
            raise ConnectionError("no route to host")
        self._write(opened=run.key)

    def logged(self):
        return {("train/loss", 1)}  # what a resumed job finds: step 1 is there

    def log(self, points):
        time.sleep(self.settings.get("hang", 0))
        if self.settings.get("fail") == "log":
            raise OSError(28, "No space left on device")
        self._write(points=[[p.key, p.step, p.value] for p in points])

    def close(self, finished=False):
        self._write(closed=finished)


def make(name, settings, sweep, results_root):
    return FileTracker(settings, sweep, results_root)
