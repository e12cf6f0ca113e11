"""One stage job's rows of a table, wherever they live: its own small files, or the packs compaction merged them into.

`rlsweep query` and every view read the tables through the catalog (catalog.py). Code that needs one stage job's
rows as data (an extension copying its donor's train_steps, a copied evaluation, an Optuna trial annotating its runs
row, gpu-check reading what its jobs wrote) comes here instead, and takes them from where packs.resolve says they
live, exactly as a query would. No module outside results/ lists a table's folder by name (tests/unit/core/test_structure.py):
a listing by name cannot see rows that compaction moved into a pack, and misses them silently.

Only the files that can hold the asked-for rows are opened: small files are chosen by name before any is read (at
10,000 runs a table has tens of thousands of them), packs (a few per table) by their footers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from workflow.layout import is_pack, runs_file, table_dir, table_file_key
from workflow.results.files import UNREADABLE, arrow_file
from workflow.results.packs import SOURCE, TableLayout, read_manifest, read_pack, resolve
from workflow.results.verdicts import Verdicts, check_file


class _Vanished(Exception):
    """A listed file was gone when read: a compaction packed it meanwhile, into a pack the listing may not have seen."""


def layout_of(results_root: str | Path, table: str, job: tuple[str, str],
              keep: Callable[[str], bool] | None = None) -> TableLayout:
    """Where a reader takes the rows of one stage job (`job`: its (stage, stage id)), or of those of its file stems
    that `keep(stem)` accepts: its live small files and the live packs that hold them, less the rows a newer writing
    supersedes. Every small file of the job takes part in that decision (a retrained stage's first new train_steps
    file hides all of its packed steps: packs.owner_key), so the job is chosen before `keep` narrows. Unreadable
    files, and files whose digest does not match, are left out (the catalog and `rlsweep doctor` name them)."""
    def own(stem: str) -> bool:
        return table_file_key(table, stem) == job

    files, packs, broken = [], [], []
    root = Path(results_root).resolve()
    verdicts = Verdicts(root)
    for path in sorted(table_dir(root, table).glob("*.parquet")):
        if not is_pack(path.stem) and not own(path.stem):
            continue  # another stage job's file: never opened
        try:
            with arrow_file(path) as f:  # regular files only: a FIFO would block, a symlink lead out
                schema = pq.read_schema(f)
                damaged = check_file(path, f.fileno(), verdicts)  # (its digest, once per identity: verdicts.py)
        except FileNotFoundError:  # removed since the glob: a compaction packed it (the caller lists again)
            raise _Vanished(path) from None
        except UNREADABLE:
            damaged = "unreadable"
        if damaged:
            manifest = read_manifest(path) if is_pack(path.stem) else None
            if manifest is not None:  # (still decides what it superseded: packs.resolve)
                broken.append(manifest.pack(path))
            continue
        pack = read_pack(path, schema)
        if pack is not None:
            packs.append(pack)
        elif not is_pack(path.stem):
            files.append(path)
    verdicts.save()
    return resolve(table, files, packs, broken).only(lambda stem: own(stem) and (keep is None or keep(stem)))


def read_layout(layout: TableLayout) -> pa.Table | None:
    """The rows a layout (layout_of) gives: its small files whole, each pack's visible rows less its `packed_from`
    column, as one table (columns by name; a column an older file lacks reads as null). None: no rows anywhere."""
    parts = []
    for path in layout.files:
        try:
            with arrow_file(path) as f:
                parts.append(pq.read_table(f))
        except FileNotFoundError:  # packed and removed since the listing (the caller lists again)
            raise _Vanished(path) from None
    for pack in layout.packs:
        wanted = sorted(set(layout.sources[pack]) - layout.hidden[pack])
        try:
            rows = pq.read_table(pack, filters=pc.field(SOURCE).isin(wanted))
        except FileNotFoundError:  # merged into a newer pack and removed since the listing
            raise _Vanished(pack) from None
        parts.append(rows.drop_columns([SOURCE]))
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return None
    return pa.concat_tables(parts, promote_options="permissive")


def _rows(results_root: str | Path, table: str, job: tuple[str, str] | None,
          keep: Callable[[str], bool] | None = None) -> pa.Table | None:
    if job is None:  # a name no stage job writes: no rows of any
        return None
    for attempt in range(3):  # a compaction deletes only what its pack (in place by then) holds: a second listing
        try:  # sees the pack; a third, only if another compaction ran in between
            return read_layout(layout_of(results_root, table, job, keep))
        except _Vanished as e:
            if attempt == 2:
                raise FileNotFoundError(f"{e.args[0]}: removed while it was read, three times (compactions running "
                                        "back to back?)") from None
    raise AssertionError("unreachable")


def rows_written_as(results_root: str | Path, table: str, stem: str) -> pa.Table | None:
    """The rows a stage job wrote under one file name (`stem`, layout.py's names): from that file, or from the pack
    holding them. None when there are none, or a newer writing of the stage job supersedes them."""
    return _rows(results_root, table, table_file_key(table, stem), lambda s: s == stem)


def stage_rows(results_root: str | Path, table: str, stage: str, stage_id: str) -> pa.Table | None:
    """Every row one stage job holds in `table` (train_steps: all its checkpoint intervals; runs and the eval tables:
    every file it wrote), wherever they are. None: it has none."""
    return _rows(results_root, table, (stage, stage_id))


def runs_row_file(results_root: str | Path, stage: str, stage_id: str, step: int | None = None,
                  group: str | None = None) -> Path:
    """The small file holding a stage job's runs row (it may not exist): read it directly while the job is not done
    (a stage job's files are packed only once it is); `rlsweep watch` reads it so, without listing the table."""
    return Path(runs_row_text(runs_dir_text(results_root), stage, stage_id, step, group))


def runs_dir_text(results_root: str | Path) -> str:
    """The runs table's folder, as a string (for runs_row_text)."""
    return os.fspath(table_dir(results_root, "runs"))


def runs_row_text(runs_dir: str, stage: str, stage_id: str, step: int | None = None, group: str | None = None) -> str:
    """runs_row_file as a string under `runs_dir` (runs_dir_text), made without a Path (`rlsweep watch` names
    ~20,000 of them at its first look at a 10,000-run sweep)."""
    return f"{runs_dir}/{runs_file(stage, stage_id, step, group)}.parquet"
