"""Ctrl-C while a worker thread runs native code (a DuckDB query), seen by the main thread without fail.

Three loaded CI runs sent `rlsweep query` a Ctrl-C that went unanswered for 60 s: their thread dumps showed the main
thread in its wait loop (0.2 s slices of Python bytecode, where Python runs its SIGINT handler) and DuckDB's query
running. The likely cause, not reproduced here in isolation: Python runs that handler in the main thread only when
the thread's "eval breaker" is set; the C-level handler sets it, but in CPython 3.11 another thread taking the GIL
(DuckDB's, which checks for signals many times a second) recomputes the breaker as that thread sees it and can clear
it. The C-level handler also writes the signal number to Python's wakeup fd, in whichever thread it runs: `CtrlC`
waits on that fd, which does not depend on that delivery. While it watches, Python's own SIGINT handler only notes
the press (raising KeyboardInterrupt is left to the caller, at a point where it can stop its worker first).
"""

from __future__ import annotations

import os
import select
import signal
import threading


class CtrlC:
    """`with CtrlC() as ctrl_c:` watch for Ctrl-C; `ctrl_c.wait(s, done)` waits until `done` is set, `ctrl_c.wake()`
    is called (by the worker, as it ends), Ctrl-C or `s` seconds, and says whether Ctrl-C was pressed. Outside the
    main thread, or where a wakeup fd is already in use (an asyncio loop's), it waits on `done` alone and Ctrl-C
    reaches the main thread as KeyboardInterrupt, as usual."""

    def __init__(self) -> None:
        self._read = self._write = None
        self._pressed = False
        self._lock = threading.Lock()  # wake() may run in the worker after __exit__ closed the pipe

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is not threading.main_thread():
            return self
        read, write = os.pipe()
        for fd in (read, write):
            os.set_blocking(fd, False)
        previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        if previous_fd != -1:  # someone else's: leave it theirs
            signal.set_wakeup_fd(previous_fd)
            os.close(read), os.close(write)
            return self
        self._read, self._write = read, write
        self._previous = signal.signal(signal.SIGINT, self._note)
        return self

    def _note(self, *_) -> None:
        self._pressed = True

    def wait(self, timeout: float, done: threading.Event) -> bool:
        if self._read is None:
            done.wait(timeout)
            return False
        if not done.is_set() and not self._pressed:
            ready, _, _ = select.select([self._read], [], [], max(0.0, timeout))
            if ready:
                try:
                    woken_by = os.read(self._read, 512)
                except BlockingIOError:
                    woken_by = b""
                self._pressed |= signal.SIGINT in woken_by
        return self._pressed

    def wake(self) -> None:
        with self._lock:
            if self._write is not None:
                try:
                    os.write(self._write, b"\0")  # (no signal has number 0)
                except BlockingIOError:  # the pipe is full of wake-ups: one more changes nothing
                    pass

    def __exit__(self, *exc) -> None:
        if self._read is None:
            return
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGINT, self._previous)
        with self._lock:
            os.close(self._read), os.close(self._write)
            self._read = self._write = None
