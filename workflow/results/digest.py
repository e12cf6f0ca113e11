"""A table file's digest: what tells its bytes from changed ones (issue 80).

Parquet's own page checksums do not serve: DuckDB's COPY (which writes the packs) cannot write them and DuckDB's reader
ignores them, and a flipped byte inside a zstd page can decode without error into other values, which a query then
sums in silence. So every Parquet file rlsweep writes (writer.write_parquet, compaction's packs) carries a SHA-256 of
its own bytes in its footer's key-value metadata, under `rlsweep.sha256`:

- the writer writes the file with 64 zeros as the value, hashes the whole file so, and then overwrites the zeros with
  the hex digest in place (same length, so nothing else moves; the file is still a temporary then, see atomic.py);
- a reader finds the value in the footer, hashes the file with the value read as zeros again, and compares.

The digest so covers every byte but its own: the data pages, the footer's offsets, statistics and schema, the pack's
list of what it holds. It is written twice, under `rlsweep.sha256` and `rlsweep.digest`: a file that holds neither
was written before digests and reads as before (`UNSEALED`), so with one entry a changed byte in its key would have
passed the file as one of those; with two, damage to either is itself found (tests/unit/results/test_digest.py
changes every byte of a file in turn).

Where the value sits: Parquet's footer is Thrift compact; a key-value pair with a 14-byte key and a 64-byte value is
`18 0e <key> 18 40 <value>` in the bytes of both pyarrow's and DuckDB's footers (tests/unit/results/test_digest.py).
pyarrow would also copy schema metadata into its `ARROW:schema` entry (base64, where it could not be patched), so
pyarrow writes the pair with `ParquetWriter.add_key_value_metadata`, which touches the Parquet footer only.

Hashing runs at about 1 GB/s (hashlib's SHA-256 on one core of the build machine); the catalog asks it once per file
identity (verdicts.py), doctor and compaction every time.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

KEY, KEY2 = "rlsweep.sha256", "rlsweep.digest"  # (both 14 bytes: one pattern)
PLACEHOLDER = "0" * 64
METADATA = {KEY: PLACEHOLDER, KEY2: PLACEHOLDER}  # what a writer puts in the footer for `seal` to fill in
# a Thrift compact KeyValue: field 1 (binary, 14 bytes), field 2 (binary, 64 bytes)
_PAIRS = tuple(b"\x18\x0e" + k.encode() + b"\x18\x40" for k in (KEY, KEY2))
_TAIL = 8  # a Parquet file ends with the footer's length (4 bytes, little-endian) and b"PAR1"
_CHUNK = 8 << 20


@dataclass(frozen=True)
class Verdict:
    """What checking one file's bytes found. `digest`: the value its footer holds (None: it holds none)."""

    ok: bool
    digest: str | None = None
    reason: str | None = None  # why not ok

    @property
    def sealed(self) -> bool:
        return self.digest is not None


UNSEALED = Verdict(True)  # a file without a digest (written before digests): nothing to check it against


def _pread(fd: int, n: int, offset: int) -> bytes:
    chunks = []
    while n > 0:  # pread may return less than asked (a signal, a network file system)
        chunk = os.pread(fd, n, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset, n = offset + len(chunk), n - len(chunk)
    return b"".join(chunks)


def locate(fd: int, size: int) -> list[tuple[int, str]]:
    """(offset of the value in the file, the value) of each of the two digest entries the footer holds: none (not
    Parquet, cut short, or written before digests), one (the other damaged), or both."""
    return _locate(lambda n, offset: _pread(fd, n, offset), size)


def _locate(read, size: int) -> list[tuple[int, str]]:
    if size < 2 * 4 + _TAIL:
        return []
    tail = read(_TAIL, size - _TAIL)
    if len(tail) != _TAIL or tail[4:] != b"PAR1":
        return []
    length = int.from_bytes(tail[:4], "little")
    start = size - _TAIL - length
    if length <= 0 or start < 4:
        return []
    footer = read(length, start)
    found = []
    for pair in _PAIRS:
        at = footer.rfind(pair)
        if at < 0 or at + len(pair) + 64 > len(footer):
            continue
        value = footer[at + len(pair):at + len(pair) + 64]
        found.append((start + at + len(pair), value.decode("ascii", errors="replace")))
    return found


def _hash(fd: int, size: int, values: list[int]) -> str:
    """SHA-256 of the file's bytes with the 64 at each offset of `values` read as PLACEHOLDER."""
    h = hashlib.sha256()
    offset = 0
    for at in [*sorted(values), size]:
        while offset < at:
            chunk = _pread(fd, min(_CHUNK, at - offset), offset)
            if not chunk:
                raise OSError(f"the file ended at byte {offset} of {size} while it was hashed")
            h.update(chunk)
            offset += len(chunk)
        if at < size:
            h.update(PLACEHOLDER.encode())
            offset = at + 64
    return h.hexdigest()


def check(fd: int, size: int | None = None) -> Verdict:
    """Whether the bytes of the file open as `fd` are those its digest was taken of (UNSEALED: it has none)."""
    size = os.fstat(fd).st_size if size is None else size
    found = locate(fd, size)
    if not found:
        return UNSEALED
    values = {value for _, value in found}
    value = found[0][1]
    if len(found) < len(_PAIRS) or len(values) > 1:
        return Verdict(False, value, "its footer's digest entries are damaged (one is missing or they differ)")
    if value == PLACEHOLDER:
        return Verdict(False, value, "its digest was never written (its writer stopped before sealing it)")
    actual = _hash(fd, size, [at for at, _ in found])
    if actual != value:
        return Verdict(False, value, f"its bytes are not those written (SHA-256 {actual[:12]}..., its footer says "
                                     f"{value[:12]}...): changed since it was written")
    return Verdict(True, value)


def is_sealed(path: str | Path) -> bool:
    """Whether a file's footer holds a digest entry (its bytes not checked: `check`)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        return bool(locate(fd, os.fstat(fd).st_size))
    finally:
        os.close(fd)


def check_path(path: str | Path) -> Verdict:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        return check(fd)
    finally:
        os.close(fd)


def seal(path: str | Path) -> str:
    """Write the digest of a just-written Parquet file whose footer holds METADATA into it; returns it. Call it on
    the temporary, before the rename (a reader never sees a file whose digest is still zeros)."""
    fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        found = locate(fd, size)
        if len(found) != len(_PAIRS) or any(value != PLACEHOLDER for _, value in found):
            raise ValueError(f"{path}: no {KEY} / {KEY2} placeholders in its footer to seal")
        digest = _hash(fd, size, [at for at, _ in found])
        for at, _ in found:
            os.pwrite(fd, digest.encode("ascii"), at)
        return digest
    finally:
        os.close(fd)


def seal_bytes(data: bytes) -> bytes:
    """`seal` for a Parquet file held in memory (one written to a buffer)."""
    found = _locate(lambda n, offset: data[offset:offset + n], len(data))
    if len(found) != len(_PAIRS) or any(value != PLACEHOLDER for _, value in found):
        raise ValueError(f"no {KEY} / {KEY2} placeholders in the footer to seal")
    digest = hashlib.sha256(data).hexdigest().encode("ascii")
    out = bytearray(data)
    for at, _ in found:
        out[at:at + 64] = digest
    return bytes(out)
