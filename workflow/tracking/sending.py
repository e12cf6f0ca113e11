"""The sending loop a job's trackers run in (a child process of the job, or a thread in tests): open each tracker on
the tracker run, ask what it already holds (a resumed job, the next segment, an evaluation that finished earlier),
send what is missing as it comes, and let go at the end. Any tracker error (no network, a bad key, a server that is
down, a full disk) is one warning naming the tracker and switches that tracker off for the rest of the job; the next
`rlsweep track` (a sweep's last job runs it) sends what it missed."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Iterable

from workflow.tracking.base import Tracker
from workflow.tracking.runs import Point, TrackedRun, train_points

SEND_EVERY_S = 5.0  # how often queued rows go out (and once more at the end)

def print_warning(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


# what the loop is fed: ("train", train_steps rows) | ("points", [Point]) | ("end", finished); None: nothing came
# within the timeout it asked for
Item = tuple[str, Any]


def send(trackers: Iterable[tuple[str, Callable[[], Tracker]]], run: TrackedRun,
         next_item: Callable[[float], Item | None], warn: Callable[[str], None]) -> None:
    """Run the trackers of `run` until an ("end", finished) item (or next_item raising EOFError: the job is gone,
    nothing says it finished, and what it queued since the last send is dropped). Rows are sent every SEND_EVERY_S and at the end, not each step: a tracker's call (an
    SQLite commit, a W&B record, a flushed events file) costs about the same for one row as for a hundred."""
    open_ = []
    for name, make in trackers:
        try:
            tracker = make()
            tracker.open(run)
            open_.append((name, tracker, tracker.logged()))
        except Exception as e:  # noqa: BLE001 - a tracker never fails the job
            warn(f"tracker {name} off for {run.name}: {type(e).__name__}: {str(e)[:300]}")
    done, finished, items, last = False, False, [], time.monotonic()
    while not done:
        try:
            item = next_item(max(0.0, last + SEND_EVERY_S - time.monotonic()))
        except EOFError:
            # the job is gone without a word (killed): what it queued and was not sent yet is left to the job that
            # resumes it, or to `rlsweep track`. Sent now, it could race that job's trackers, which read what the
            # run holds when they open: the same steps twice (tests/e2e/test_tracking.py caught it in W&B's run)
            item, items = ("end", False), []
        if item is not None and item[0] == "end":
            done, finished = True, bool(item[1])
        elif item is not None:
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
                warn(f"tracker {name} off for {run.name}: {type(e).__name__}: {str(e)[:300]}")
                open_.remove(entry)
    for name, tracker, _ in open_:
        try:
            tracker.close(finished)
        except Exception as e:  # noqa: BLE001
            warn(f"tracker {name}: closing {run.name}: {type(e).__name__}: {str(e)[:300]}")


def as_points(payload: list[list[Any]]) -> list[Point]:
    """Points from their JSON form ([key, step, value] each)."""
    return [Point(str(k), int(s), float(v)) for k, s, v in payload]
