"""Compaction: finished stages' small table files merged into packs (packs.py says how readers take them).

Runs at the end of a sweep (the aggregate stage, once the store has AUTO_FILES small files or more) and as
`rlsweep compact`. The tables are every sweep's (results/_store/tables/, layout.py), so a pack holds the rows of
stage jobs of several sweeps (a sweep's catalog reads its own rows of it). Per table, under a lock (one compaction
of a results directory at a time):

1. list the table's files (packs.table_layout); the small files of finished stage jobs (DONE.json written, no
   RUNNING.lock) are packed, with their fingerprints taken before they are read; once a table has MAX_PACKS live
   packs, the new pack also takes over their rows (less the superseded ones) and `replaces` them;
2. check every file it would copy in full (its digest, digest.py; a file from before digests decoded whole): one that
   fails is refused, left where it is and named in the result's note, so damage is never rewritten into a pack that
   every check would then believe (`rlsweep doctor` names whose rows it held);
3. write the pack with DuckDB to a temporary, seal it with its digest, write its manifest (packs.py), fsync, and if
   any packed file changed meanwhile, drop it (the next compaction packs the new file); else rename it into place
   and fsync the directory;
4. only then delete: each packed file still as it was packed, the replaced packs (with their manifests and mirrors),
   and leftovers of earlier rounds. A crash anywhere leaves a state packs.resolve reads as every row exactly once.

Beside each pack it keeps a mirror, a copy of its bytes in `_store/mirrors/<table>/` (layout.pack_mirror), written
before the pack takes its name: should the pack be damaged later, `rlsweep doctor --fix` restores it from there, every
sweep's rows back byte for byte, rows that only retraining could recompute (train_steps with their timings, eval
samples) among them. It costs the disk the packs' size again (zstd: 12.8 MB at 1,000 runs in bench/compaction.py,
where the small files were 223 MB); no query lists it.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import duckdb

import pyarrow as pa

from workflow.atomic import discard, parse_temporary, replacing, temporary_sibling
from workflow.errors import UserError
from workflow.layout import (DONE, is_pack, pack_file, pack_mirror, pack_seq, parse_table_file, store_dir,
                             table_dir, table_file_key)
from workflow.results import digest
from workflow.results.catalog import sql_str, table_files
from workflow.results.doctor import owning_job
from workflow.results.packs import (MANIFEST, SOURCE, TableLayout, fingerprint, manifest_path, pack_metadata,
                                    table_layout, write_manifest)
from workflow.results.files import UNREADABLE, open_regular
from workflow.results.verdicts import Verdicts, check_file
from workflow.results.schemas import TABLES
from workflow.runlock import LOCK_NAME

# small files read by one DuckDB statement: with union_by_name DuckDB keeps a reader of every file listed until the
# statement ends (~150 KB each) and binds them in time growing with the square of their number (10,000 files 10 s,
# 20,000 files 40 s; a 10,000-run sweep's 200,000 eval files took 23 GB and were killed for memory). More files are
# packed in parts of this many, each written to a temporary file, then merged.
BATCH = 4096
AUTO_FILES = 256  # the aggregate stage compacts the tables with at least this many small files (fewer: a query is fast)
MAX_PACKS = 4  # a table with this many live packs has them merged into its next one
LOCK = ".compact.lock"


class CompactionBusy(UserError):
    """Another process is compacting the tables."""


@dataclass
class Compacted:
    """What compacting one table did."""

    table: str
    files_before: int = 0  # readable files a query opened before (small files and packs)
    files_after: int = 0
    packed: int = 0  # small files whose rows went into the new pack
    merged: int = 0  # older packs merged into it
    rows: int = 0  # rows in the new pack
    removed: int = 0  # files deleted (packed files, replaced packs, leftovers)
    skipped: int = 0  # small files left as they are (their stage job is not finished, or changed while packing)
    refused: list[Path] = field(default_factory=list)  # files that failed their check: left where they are
    pack: Path | None = None
    seconds: float = 0.0
    note: str = ""  # why nothing was packed though files were eligible, and what was refused


def finished(results_root: Path, table: str, stem: str) -> Path | None:
    """The directory of the stage job that wrote a table file if it is done with it (DONE.json written and no
    RUNNING.lock); None otherwise."""
    owner = parse_table_file(table, stem)
    job = owning_job(results_root, owner) if owner else None
    if job is None:
        return None
    directory = job.dir(results_root)
    return directory if (directory / DONE).is_file() and not (directory / LOCK_NAME).exists() else None


def damage(path: Path) -> str | None:
    """Why a table file may not be copied (None: it may): its digest does not match, or (a file from before
    digests) it does not decode in full. Checked every time: what it copies, a digest vouches for from then on."""
    try:
        fd = open_regular(path)
        try:
            return check_file(path, fd, deep=True)
        finally:
            os.close(fd)
    except UNREADABLE as e:
        return str(e).strip().rstrip(".") or type(e).__name__


def small_file_count(results_root: str | Path) -> int:
    return sum(1 for paths in table_files(results_root).values() for p in paths if not is_pack(p.stem))


def compact(results_root: str | Path, min_files: int = 0) -> list[Compacted]:
    """Compact every table (nothing when they have fewer than `min_files` small files; by default it runs whatever
    there is, and checks every pack even with nothing to pack)."""
    root = Path(results_root).resolve()
    if small_file_count(root) < min_files:
        return []
    with _locked(store_dir(root) / "tables"):
        return [compact_table(root, table) for table in TABLES]


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / LOCK, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            raise CompactionBusy(f"{directory}: another compaction is running ({f.read().strip() or 'pid unknown'})"
                                 ) from None
        f.truncate(0)
        f.write(f"pid {os.getpid()} on {os.uname().nodename}")
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def compact_table(results_root: Path, table: str) -> Compacted:
    t0 = time.monotonic()
    directory = table_dir(results_root, table)
    layout = table_layout(directory, table)
    # every pack is checked in full first (it costs a hash, ~1 s a GB): a damaged one is never merged into a new pack
    # (which every check would then believe), and its word decides nothing: a leftover small file is deleted for a
    # pack's rows, a retired pack for a newer pack's. Taken as unreadable, its leftovers are live files (the intact
    # copies) and the packs it replaced live again (packs.resolve); and the compaction says it found it
    reasons = {p: why for p in layout.packs if (why := damage(p)) is not None}
    if reasons:
        layout = table_layout(directory, table, damaged=set(reasons))
    out = Compacted(table, files_before=len(layout.readable) + len(reasons))
    homes = {f: finished(results_root, table, f.stem) for f in layout.files}  # each file's stage job's directory
    eligible = [f for f in layout.files if homes[f] is not None]
    out.skipped = len(layout.files) - len(eligible)
    reasons.update({f: why for f in eligible if (why := damage(f)) is not None})
    eligible = [f for f in eligible if f not in reasons]  # never copied: a new pack would vouch for the damage
    out.refused = list(reasons)
    out.skipped += sum(1 for f in reasons if not is_pack(f.stem))
    # a pack from before digests is merged into the next (sealed) one, once decoded in full (`damage`): nothing can
    # tell a change in it that still decodes, but from then on one is seen
    merge = layout.packs if len(layout.packs) >= MAX_PACKS or not all(map(digest.is_sealed, layout.packs)) else []
    if eligible or merge:
        sources = {f.stem: fingerprint(f) for f in eligible}
        for pack in merge:
            sources.update({s: fp for s, fp in layout.sources[pack].items() if s not in layout.hidden[pack]})
        seq = _next_seq(directory)
        path = directory / f"{pack_file(seq, secrets.token_hex(4))}.parquet"
        try:
            with replacing(path) as tmp:
                out.rows = _write_pack(tmp, path, table, eligible, merge, layout, sources, [p.name for p in merge])
                changed = [f for f in eligible if _fingerprint_or_none(f) != sources[f.stem]]
                if changed:  # rewritten while being read: the pack may hold either version (the next round packs it)
                    raise _Changed(changed)
        except _Changed as e:
            discard(manifest_path(path))
            discard(pack_mirror(path))
            out.skipped, out.rows = len(layout.files), 0
            out.note = str(e)
        else:
            _fsync_dir(directory)
            _trust(results_root, path)
            out.pack, out.packed, out.merged = path, len(eligible), len(merge)
            for f in eligible:
                out.removed += _remove_if(f, sources[f.stem])
            for pack in merge:
                out.removed += _remove_pack(pack)
    for f in layout.leftovers:  # leftovers of an earlier round whose moves did not finish
        out.removed += _remove_if(f, None)
    for pack in layout.retired:
        out.removed += _remove_pack(pack)
    # what no layout holds (its footer does not read): never copied, and said, as a damaged pack is
    known = {*layout.readable, *layout.leftovers, *layout.retired, *reasons}
    for path in sorted(directory.glob("*.parquet")):
        if path not in known and path.exists() and (why := damage(path)) is not None:
            reasons[path] = why
            out.refused.append(path)
    if out.refused:
        note = (f"refused {len(out.refused)} damaged file(s), left as they are: "
                + "; ".join(f"{p.name} ({reasons[p]})" for p in out.refused[:3])
                + (" ..." if len(out.refused) > 3 else "") + "; `rlsweep doctor` names whose rows they hold")
        out.note = f"{out.note}; {note}" if out.note else note
    _remove_orphans(directory)
    out.files_after = len(table_layout(directory, table).readable)
    out.seconds = time.monotonic() - t0
    return out


def _remove_orphans(directory: Path) -> None:
    """Manifests and mirrors of packs that are not there (a compaction stopped between writing them and the pack)."""
    for manifest in directory.glob(f"*{MANIFEST}"):
        pack = directory / f"{manifest.name.removesuffix(MANIFEST)}.parquet"
        if not pack.exists():
            manifest.unlink(missing_ok=True)
    mirrors = pack_mirror(directory / "x.parquet").parent
    for mirror in mirrors.glob("*.parquet") if mirrors.is_dir() else ():
        if not (directory / mirror.name).exists():
            mirror.unlink(missing_ok=True)


def _next_seq(directory: Path) -> int:
    """The next pack's sequence number: above every pack there, damaged ones included (a damaged pack still decides
    what it superseded, by its place in the sequence: packs.resolve)."""
    return 1 + max((pack_seq(p.stem) for p in directory.glob("*.parquet") if is_pack(p.stem)), default=0)


def _trust(results_root: Path, pack: Path) -> None:
    """The verdict for the pack just written (its digest taken of the bytes now on disk): the first query after a
    compaction need not hash it again."""
    try:
        st = os.stat(pack)
        found = digest.check_path(pack)
    except OSError:
        return
    if found.ok and found.sealed:
        verdicts = Verdicts(results_root)
        verdicts.remember(pack, st, found.digest)
        verdicts.save()


def drop_rows(results_root: str | Path, drop: set[tuple[str, str]]) -> int:
    """Take the rows of the stage jobs `drop` ((stage, stage id) pairs: what `rlsweep gc` removes) out of every pack
    that holds some: each such pack is rewritten without them as a new pack that replaces it (the same sequence of
    steps as compaction, so a crash leaves every other row readable exactly once). Returns the packs rewritten.
    The stages' own small files are the caller's to delete."""
    root = Path(results_root).resolve()
    rewritten = 0
    with _locked(store_dir(root) / "tables"):
        for table in TABLES:
            directory = table_dir(root, table)
            layout = table_layout(directory, table)
            for pack in layout.packs:
                gone = {stem for stem in layout.sources[pack] if table_file_key(table, stem) in drop}
                if not gone:
                    continue
                why = damage(pack)
                if why is not None:  # rewriting it would launder the damage (`rlsweep doctor` says what to do)
                    raise UserError(f"{pack}: damaged ({why}); its rows of the stage jobs to remove stay until "
                                    "`rlsweep doctor --fix` has dealt with it")
                layout.hidden[pack] |= gone
                sources = {st: fp for st, fp in layout.sources[pack].items() if st not in layout.hidden[pack]}
                seq = _next_seq(directory)
                path = directory / f"{pack_file(seq, secrets.token_hex(4))}.parquet"
                with replacing(path) as tmp:
                    _write_pack(tmp, path, table, [], [pack], layout, sources, [pack.name])
                _fsync_dir(directory)
                _trust(root, path)
                _remove_pack(pack)
                layout.retired.append(pack)
                rewritten += 1
    return rewritten


class _Changed(Exception):
    def __init__(self, files: list[Path]):
        super().__init__(f"{len(files)} file(s) changed while they were packed: {', '.join(f.name for f in files[:3])}")


def _write_pack(tmp: Path, path: Path, table: str, files: list[Path], packs: list[Path], layout: TableLayout,
                sources: dict, replaces: list[str]) -> int:
    """The rows of `files` (each with its stem in SOURCE) and of `packs` (less their hidden rows) into one Parquet
    file whose footer says what it holds, sealed with its digest, and the manifest of `path` (what `tmp` becomes)
    beside it; returns its row count."""
    def listed(paths) -> str:
        return ", ".join(sql_str(str(p)) for p in paths)

    def rows_of(some: list[Path]) -> str:  # each row with the stem of the file it comes from
        return (f"SELECT * EXCLUDE (rlsweep_path), parse_filename(rlsweep_path, true) AS {SOURCE} "
                f"FROM read_parquet([{listed(some)}], union_by_name = true, filename = 'rlsweep_path')")

    entries = pack_metadata(table, sources, replaces)
    meta = ", ".join(f"{sql_str(k.decode())}: {sql_str(v)}"
                     for k, v in [*entries.items(), *((k.encode(), v) for k, v in digest.METADATA.items())])
    pack_name = parse_temporary(tmp)[0]
    # the parts of many files: a temporary beside the pack's (the same file system), removed however this ends
    batches = temporary_sibling(tmp.parent / f"{pack_name}.parts") if len(files) > BATCH else None
    # what DuckDB spills (a big merge does), beside the pack too: by default it spills into the working directory
    spill = temporary_sibling(tmp.parent / f"{pack_name}.spill")
    con = duckdb.connect(":memory:")
    try:
        con.execute(f"SET temp_directory = {sql_str(str(spill))}")
        parts = []
        if batches is not None:
            discard(batches)
            batches.mkdir()
            written = []
            for i in range(0, len(files), BATCH):
                written.append(batches / f"{i // BATCH:06d}.parquet")
                con.execute(f"COPY ({rows_of(files[i:i + BATCH])}) TO {sql_str(str(written[-1]))} (FORMAT parquet)")
            parts.append(f"SELECT * FROM read_parquet([{listed(written)}], union_by_name = true)")
        elif files:
            parts.append(rows_of(files))
        for pack in packs:
            hidden = layout.hidden[pack]
            parts.append(f"SELECT * FROM read_parquet([{listed([pack])}])"
                         + (f" WHERE {SOURCE} NOT IN ({', '.join(map(sql_str, sorted(hidden)))})" if hidden else ""))
        n = con.execute(f"COPY ({' UNION ALL BY NAME '.join(parts)}) TO {sql_str(str(tmp))} (FORMAT parquet, "
                        f"COMPRESSION zstd, KV_METADATA {{{meta}}})").fetchone()[0]
    finally:
        con.close()
        discard(spill)
        if batches is not None:
            discard(batches)
    sha256 = digest.seal(tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    # before the pack has its name (each outlives damage to it): its manifest, and its mirror, a copy of its bytes
    write_manifest(path, table, entries, tmp.stat().st_size, sha256)
    mirror = pack_mirror(path)
    with replacing(mirror) as copy:
        shutil.copyfile(tmp, copy)
        with open(copy, "rb") as f:
            os.fsync(f.fileno())
    return int(n)


def _fingerprint_or_none(path: Path) -> list[int] | None:
    try:
        return fingerprint(path)
    except FileNotFoundError:
        return None


def _remove_pack(pack: Path) -> int:
    """Delete a replaced pack, then its mirror and its manifest (a pack is never without them)."""
    removed = _remove_if(pack, None)
    pack_mirror(pack).unlink(missing_ok=True)
    manifest_path(pack).unlink(missing_ok=True)
    return removed


def _remove_if(path: Path, was: list[int] | None) -> int:
    """Delete `path` if it is still the file that was packed (`was`: its fingerprint then; None: any)."""
    if was is not None and _fingerprint_or_none(path) != was:
        return 0  # rewritten since: the new file is live and supersedes its stage job's rows in the pack
    try:
        path.unlink()
        return 1
    except FileNotFoundError:
        return 0


def _fsync_dir(directory: Path) -> None:
    """Make the pack's rename durable before anything it replaces is deleted."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def compaction_line(done: list[Compacted]) -> str:
    """One line for a log: files before -> after in all, packed, rows, seconds."""
    before, after = sum(c.files_before for c in done), sum(c.files_after for c in done)
    rows = sum(c.rows for c in done)
    notes = "; ".join(f"{c.table}: {c.note}" for c in done if c.note)
    return (f"{before} -> {after} files ({sum(c.packed for c in done)} packed, {rows:,} rows in new packs, "
            f"{sum(c.skipped for c in done)} of unfinished stages left) in {sum(c.seconds for c in done):.1f} s"
            + (f"; {notes}" if notes else ""))
