"""A job's trackers in a child process: `TrackerProcess` in the job, `main` in the child
(`python -m workflow.tracking.child`).

Why a process and not a thread: the trackers' own work is Python (MLflow's SQLAlchemy and SQLite, W&B's records,
TensorBoard's protobufs), and a thread of the job doing it holds the job's GIL while it does, so the training
thread waited on it: with all three trackers on, a demo RL step took 1.10x its time with tracking off
(bench/tracking_hook.py, issue 60; the goal is 1.01x). In a child the work runs beside the job, on another core
where there is one, and at the lowest CPU priority (nice 19) where there is none, so that it takes only what the
job leaves. The job's side is one thread that writes each queued item to the child's stdin as a JSON line (the job's
thread only queues; a stalled child fills the pipe, which blocks that writer, never the job). The child gets a
bounded time at the end (CLOSE_S) and is killed past it, with one warning: `rlsweep track` sends what it missed.

The protocol, one JSON value per line: a header {"settings", "run", "sweep", "results_root", "make"}, then
["train", rows], ["points", [[key, step, value], ...]], and ["end", finished]. A child whose stdin closes without an
end (its job was killed) lets go of its runs as unfinished without sending what it had not sent yet: the job that
resumes the run sends those steps again, and two senders of one step would log it twice.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from workflow.registry import load_object
from workflow.tracking.runs import Point, TrackedRun
from workflow.tracking.bounds import bounded
from workflow.tracking.sending import Item, as_points, print_warning, send

CLOSE_S = 30.0  # how long a finishing job waits for its trackers at most
MAKE = "workflow.tracking.base:make"  # the trackers by name (tests name another maker)
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # where the child imports rlsweep from, whatever the job's cwd


def _jsonable(value: Any) -> Any:
    """A number JSON does not know (numpy's, a 0-dim tensor) as a float, anything else as its text."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


class TrackerProcess:
    """The trackers of one tracker run, fed to a child process."""

    def __init__(self, settings: dict[str, Any], run: TrackedRun, sweep: str, results_root: str | Path,
                 warn: Callable[[str], None] = print_warning, make: str = MAKE):
        self.run, self.warn, self.finished, self.closed = run, warn, False, False
        env = bounded(dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p)))  # (an unreachable server: bounds.py)
        # stderr inherited: the child's warnings land where the job's own go (its log file)
        self.child = subprocess.Popen([sys.executable, "-m", "workflow.tracking.child"], stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, env=env, text=True)
        self.queue: queue.Queue = queue.Queue()
        self.queue.put({"settings": settings, "run": run.as_dict(), "sweep": sweep,
                        "results_root": str(results_root), "make": make})
        self.writer = threading.Thread(target=self._write, name="rlsweep-trackers", daemon=True)
        self.writer.start()
        atexit.register(self.close)  # (a process that never calls close still gives its trackers CLOSE_S)

    # ------------------------------------------------------------------------------------- the job's thread
    def rows(self, rows: list[dict[str, Any]]) -> None:
        """train_steps rows, queued (the caller's cost: a queue put)."""
        self.queue.put(["train", rows])

    def points(self, points: list[Point]) -> None:
        self.queue.put(["points", [[p.key, p.step, p.value] for p in points]])

    def alive(self) -> bool:
        return self.child.poll() is None

    def close(self, finished: bool = False, timeout_s: float = CLOSE_S) -> None:
        """Send what is queued (within `timeout_s`) and let go of the tracker run; `finished`: the stage is done."""
        if self.closed:
            return
        self.closed, self.finished = True, self.finished or finished
        deadline = time.monotonic() + timeout_s
        self.queue.put(["end", self.finished])
        self.writer.join(timeout_s)
        try:
            self.child.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.warn(f"trackers of {self.run.name}: not done after {timeout_s:.0f}s; `rlsweep track` sends what "
                      "they missed")
            self.child.kill()
            self.child.wait()

    # --------------------------------------------------------------------------------- the writer thread
    def _write(self) -> None:
        stdin = self.child.stdin
        try:
            while True:
                item = self.queue.get()
                stdin.write(json.dumps(item, default=_jsonable) + "\n")
                stdin.flush()
                if isinstance(item, list) and item[0] == "end":
                    break
        except (OSError, ValueError):  # the child is gone (it warned, or was killed): nothing more to send
            pass
        finally:
            try:
                stdin.close()
            except OSError:
                pass


# --------------------------------------------------------------------------------------------- the child
def main() -> int:
    try:
        os.nice(19)  # only what the job leaves of the CPU (a no-op where it cannot be lowered)
    except (AttributeError, OSError):
        pass
    first = sys.stdin.readline()
    if not first:
        return 0
    header = json.loads(first)
    make = load_object(header.get("make") or MAKE)
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        try:
            for line in sys.stdin:
                lines.put(json.loads(line))
        except (OSError, ValueError):  # a line cut short by a killed job: what came before it still goes out
            pass
        lines.put(EOFError)

    threading.Thread(target=read, daemon=True).start()

    def next_item(timeout: float) -> Item | None:
        try:
            message = lines.get(timeout=timeout)
        except queue.Empty:
            return None
        if message is EOFError:
            raise EOFError
        kind, payload = message
        return (kind, as_points(payload)) if kind == "points" else (kind, payload)

    sweep, root = header["sweep"], header["results_root"]
    trackers = [(name, functools.partial(make, name, dict(s or {}), sweep, root))
                for name, s in header["settings"].items()]
    send(trackers, TrackedRun.from_dict(header["run"]), next_item, print_warning)
    return 0


if __name__ == "__main__":
    sys.exit(main())
