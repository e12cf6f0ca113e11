"""Opening a result table's file for reading, safely and consistently.

A table directory holds regular files that writers replace atomically (write, then rename over the old name). A
reader that lists the files, reads their footers and later opens them by name again can get a different file the
second time (the writer replaced it meanwhile: DuckDB then reads the old length from the new file, "only N bytes
returned"). So a reader opens each file ONCE, when it lists it, and reads everything through that descriptor: a
replaced file's old contents stay readable through it until the reader closes it.

Only regular files are opened: a symbolic link is not followed (it could point anywhere outside the results) and a
FIFO or device is never read (opening one for reading blocks until a writer appears); both are reported instead.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa

# what reading a damaged Parquet file raises: Arrow's errors, the OS's, and a footer whose bytes decode as no text
# (pyarrow's UnicodeDecodeError: a ValueError, as ArrowInvalid is)
UNREADABLE = (pa.ArrowException, OSError, ValueError)


class NotARegularFile(OSError):
    """A table directory entry that is not a regular file (a symlink, a FIFO, a device, a directory)."""


def open_regular(path: str | Path) -> int:
    """A read-only descriptor of `path` if it is a regular file; NotARegularFile says what it is otherwise."""
    try:  # O_NONBLOCK: opening a FIFO does not wait for a writer; O_NOFOLLOW: a final symlink is refused
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise NotARegularFile(e.errno, "a symbolic link (table files are read as regular files only; not "
                                  "followed)", str(path)) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else
                "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "not a regular file")
        raise NotARegularFile(errno.EINVAL, f"{kind} (table files are read as regular files only; not opened)",
                              str(path))
    return fd


@contextmanager
def arrow_file(source: int | str | Path) -> Iterator[pa.NativeFile]:
    """A table file as Arrow's own file, for pyarrow to read: `source` is a descriptor (left open) or a path (opened as
    a regular file, closed after). Its `fileno()` is a descriptor of the same file.

    Never a Python file object for pyarrow: Arrow reads one from its IO threads, and the last reference to it can
    drop there after the call has returned (a read's task is freed once its result is handed over). Dropping it
    takes the GIL; at interpreter exit a thread that asks for the GIL is ended, and the C++ unwind through that
    destructor aborts the process ("terminate called without an active exception": `rlsweep query` over a damaged
    pack, ~1 run in 120, whose warning reads the members files just before exit). Arrow's own file drops without
    Python. /dev/fd/N opens the very file `fd` is (a file replaced since still reads as it was listed)."""
    fd = source if isinstance(source, int) else open_regular(source)
    try:
        with pa.OSFile(f"/dev/fd/{fd}") as f:
            yield f
    finally:
        if not isinstance(source, int):
            os.close(fd)


class PositionalReader(io.RawIOBase):
    """A file opened for reading whose position is per thread: what DuckDB reads (pyarrow reads `arrow_file`). DuckDB's
    threads share one handle per file and each seeks, then reads: with one shared position (a plain `open()`), two threads reading two row groups of a file
    at once get each other's bytes ("Snappy decompression failure" at best). Reads are `pread`s at the thread's
    own position. It owns `fd` (closes it)."""

    def __init__(self, fd: int):
        super().__init__()
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.local = threading.local()

    @classmethod
    def of(cls, path: str | Path) -> "PositionalReader":
        return cls(open_regular(path))

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return getattr(self.local, "pos", 0)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.tell(), io.SEEK_END: self.size}[whence]
        self.local.pos = base + offset
        return self.local.pos

    def read(self, n: int = -1) -> bytes:
        pos = self.tell()
        n = self.size - pos if n is None or n < 0 else min(n, self.size - pos)
        chunks = []
        while n > 0:  # pread may return less than asked (a signal, a network file system)
            chunk = os.pread(self.fd, n, pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos, n = pos + len(chunk), n - len(chunk)
        self.local.pos = pos
        return b"".join(chunks)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
        super().close()
