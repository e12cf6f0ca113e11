"""`rlsweep gc`: the stage outputs in the shared store that no sweep references, and their removal.

Nothing is ever deleted implicitly: the store only grows as sweeps run (a stage is kept for the next sweep that
needs it). `find` lists the stage jobs whose (stage, id) the caller's `referenced` set lacks (the CLI builds it from
the sweep files: workflow/cli/gc.py), with their size, their table files and the packs holding their rows; `remove`
deletes exactly that: the stage directories, their own table files, and their rows in packs (compaction.drop_rows).
It refuses while any stage of the store runs (a held RUNNING.lock: a sweep running now may be about to need it) and
while a compaction runs (its lock).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from workflow.errors import UserError
from workflow.layout import StageJob, stage_jobs, store_dir, table_dir, table_file_key
from workflow.results.catalog import table_files
from workflow.results.compaction import drop_rows
from workflow.results.packs import table_layout
from workflow.runlock import holder


class StoreBusy(UserError):
    """A stage of the store is running: gc removes nothing then."""


@dataclass
class Garbage:
    """What no sweep references: stage directories, their own table files, and how many packs hold their rows."""

    jobs: list[StageJob] = field(default_factory=list)
    sizes: dict[StageJob, int] = field(default_factory=dict)  # bytes under each stage directory
    files: list[Path] = field(default_factory=list)  # the stages' own small table files
    packs: int = 0  # packs holding rows of them (rewritten without those rows)
    keys: set[tuple[str, str]] = field(default_factory=set)  # (stage, stage id) of everything listed

    @property
    def bytes(self) -> int:
        return sum(self.sizes.values()) + sum(_size(f) for f in self.files)


def find(results_root: str | Path, referenced: set[tuple[str, str]]) -> Garbage:
    """The stage jobs of the store (and table rows of stage jobs) whose (stage, id) is not in `referenced`."""
    root = Path(results_root)
    out = Garbage()
    for job in stage_jobs(root):
        if job.key not in referenced:
            out.jobs.append(job)
            out.sizes[job] = _tree_size(job.dir(root))
            out.keys.add(job.key)
    def unreferenced(table: str, stem: str) -> tuple[str, str] | None:
        key = table_file_key(table, stem)
        return key if key is not None and key not in referenced else None

    for table, paths in table_files(root).items():
        for p in paths:
            if (key := unreferenced(table, p.stem)) is not None:
                out.files.append(p)
                out.keys.add(key)
        layout = table_layout(table_dir(root, table), table)
        for pack in layout.packs:  # (a stage job whose rows are only packed, its directory gone, counts too)
            gone = {key for stem in layout.sources[pack] if (key := unreferenced(table, stem)) is not None}
            out.packs += bool(gone)
            out.keys |= gone
    return out


def running(results_root: str | Path) -> list[tuple[StageJob, str]]:
    """The stage jobs of the store whose lock a live owner holds, and who."""
    root = Path(results_root)
    return [(job, who) for job in stage_jobs(root) if (who := holder(job.dir(root))) is not None]


def remove(results_root: str | Path, garbage: Garbage) -> int:
    """Delete what `find` listed; returns the bytes freed. Refuses (StoreBusy) while any stage runs."""
    root = Path(results_root)
    busy = running(root)
    if busy:
        job, who = busy[0]
        raise StoreBusy(f"{len(busy)} stage(s) of {store_dir(root)} are running ({job}: {who}); run gc when no sweep is running")
    freed = garbage.bytes
    if garbage.packs:
        drop_rows(root, garbage.keys)
    for f in garbage.files:
        f.unlink(missing_ok=True)
    for job in garbage.jobs:
        shutil.rmtree(job.dir(root), ignore_errors=True)
        _remove_empty_parents(job.dir(root), store_dir(root))
    return freed


def _remove_empty_parents(path: Path, stop: Path) -> None:
    """eval/<run_id>/<eval_id>/step_<N>/ left empty by the last eval job under it."""
    for d in path.parents:
        if d == stop or stop not in d.parents:
            return
        try:
            d.rmdir()
        except OSError:
            return


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _tree_size(path: Path) -> int:
    total = 0
    for d, _, files in os.walk(path):
        total += sum(_size(Path(d) / f) for f in files)
    return total
