"""verl's trainers run as child processes of the stage (torchrun for SFT, verl's PPO driver with its Ray cluster
for RL), supervised here: the stage fails with the child's exit status, a time limit kills a run that hangs (a
failing vLLM worker can hang instead of failing), and whatever the child leaves behind goes with it: every process
it started (Ray's raylet and workers included) and the shared-memory segments it created that no live process
maps or holds open (vLLM's CPU weight sync leaks 160-240 MB of them per run)."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

import psutil

from workflow.preemption import Resumable

SHM = Path("/dev/shm")


def run_supervised(argv: list[str], env: dict[str, str], *, what: str, timeout_s: float | None = None,
                   log: Path | None = None, depends_on: dict[str, subprocess.Popen] | None = None,
                   follow: Callable[[str], None] | None = None) -> None:
    """Run argv to completion in its own session; RuntimeError on a non-zero exit or the time limit. The child's
    whole process tree is killed whenever this returns or raises (Ctrl-C, SIGTERM, preemption included), processes
    it orphaned included: this process is their subreaper (Ray's daemons detach from the driver). `log`: the
    child's output goes to this file instead of the job log, and the error carries its last lines; `follow` is
    handed each line written to it (within a second), to show the job's progress from it. `depends_on`:
    name -> a process the child cannot go on without (a multi-node run's Ray worker on each other node, named by
    its node): when one of them ends first, the child is stopped within a second and the error names it, instead
    of the child waiting out Ray's own timeouts on a node that is gone."""
    before = _segments()
    _become_subreaper()
    ours = {p.pid for p in psutil.Process().children()}
    out = open(log, "a") if log is not None else None  # appended: a resumed run's log keeps the attempt before it
    if out is not None:
        out.write(f"==== {time.strftime('%Y-%m-%d %H:%M:%S')} {what}: {' '.join(argv)}\n")
        out.flush()
    proc = subprocess.Popen(argv, env=env, start_new_session=True, stdout=out,
                            stderr=subprocess.STDOUT if out is not None else None)

    def where() -> str:
        return "its log is above" if log is None else f"its log ends:\n{_tail(log)}"
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    lines = _LineReader(log) if log is not None and follow is not None else None
    try:
        while True:
            try:
                rc = proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                pass
            finally:
                for line in lines.new() if lines is not None else ():
                    follow(line)
            for name, dep in (depends_on or {}).items():
                if dep.poll() is not None:
                    raise Resumable(f"{what} lost {name} (its process exited with status {dep.returncode}) and "
                                    f"was stopped; {where()}")
            if deadline is not None and time.monotonic() > deadline:
                raise RuntimeError(f"{what} ran longer than its time limit ({timeout_s / 60:.0f} min, "
                                   f"engine.verl.timeout_min) and was killed; {where()}")
        if rc:
            raise RuntimeError(f"{what} exited with status {rc}: {' '.join(argv)}; {where()}")
    finally:
        if out is not None:
            out.close()
        kill_tree(proc.pid)
        for orphan in psutil.Process().children():  # descendants whose parent died before it could be killed
            if orphan.pid not in ours:
                kill_tree(orphan.pid)
        remove_leaked_segments(before)


class _LineReader:
    """The lines a child writes to its log, as they come: a progress bar's carriage returns end a line too, and a
    line not yet ended waits for the next read."""

    def __init__(self, path: Path):
        self.path, self.offset, self.partial = path, 0, ""

    def new(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        *done, self.partial = re.split(r"[\r\n]", self.partial + data.decode(errors="replace"))
        return [line for line in done if line]


def _tail(log: Path, lines: int = 20) -> str:
    """The log's last lines, after the errors it names (torchrun's own summary buries a rank's error): of the last
    attempt only (a resumed run appends to its log)."""
    try:
        text = log.read_text(errors="replace").rpartition("\n==== ")[2].splitlines()  # this attempt's
    except OSError:
        return "(no log)"
    errors = [line for line in text[:-lines] if re.search(r"\w(Error|Exception): ", line)]
    return "\n".join([*errors[-5:], *(["..."] if errors else []), *text[-lines:]])


def _become_subreaper() -> None:
    """Orphans of our descendants are re-parented to this process instead of init (Linux prctl
    PR_SET_CHILD_SUBREAPER), so they can still be found and killed."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the child's own tree and process group are still killed
        pass


def kill_tree(pid: int) -> None:
    """SIGKILL a process, its process group and every descendant (collected first: children of a killed parent
    are re-parented and would be lost)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        procs = []
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=10)


def _segments() -> set[str]:
    return {p.name for p in SHM.iterdir()} if SHM.is_dir() else set()


def _in_use() -> set[int]:
    """Inodes under /dev/shm that some live process maps or holds open (its own run's, or another job's on this
    node). By inode, not name: glibc's sem_open maps a temporary file and then links it to the semaphore's name, so
    /proc/PID/maps names the temporary (deleted) file, never the name another process will open (vLLM's
    multiprocessing semaphores, created with the spawn start method, are opened by name in its workers)."""
    shm_dev = SHM.stat().st_dev
    inodes = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            lines = (proc / "maps").read_text().splitlines()
        except OSError:  # gone, or another user's
            continue
        # address perms offset dev inode path: every mapping of a file under /dev/shm
        inodes.update(int(line.split()[4]) for line in lines if " /dev/shm/" in line)
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:  # created and not yet mapped (shm_open before mmap) counts as in use too
            try:
                st = fd.stat()
            except OSError:
                continue
            if st.st_dev == shm_dev:
                inodes.add(st.st_ino)
    return inodes


def leaked_since(before: set[str]) -> list[str]:
    """/dev/shm entries created since `before` that no live process maps or holds open (what another live job on
    this node uses is not leaked)."""
    fresh = _segments() - before
    if not fresh:
        return []
    in_use = _in_use()
    leaked = []
    for name in sorted(fresh):
        try:
            if (SHM / name).stat().st_ino not in in_use:
                leaked.append(name)
        except OSError:  # removed meanwhile
            continue
    return leaked


def remove_leaked_segments(before: set[str]) -> list[str]:
    """Delete the entries leaked_since(before); returns their names."""
    removed = []
    for name in leaked_since(before):
        try:
            (SHM / name).unlink()
        except OSError:  # removed meanwhile, or another user's
            continue
        removed.append(name)
    return removed
