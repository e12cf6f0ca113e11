"""`rlsweep gc [SWEEP.yaml ...] [--remove [--yes]]`: the stage outputs in results/_store/ that no sweep references.

Referenced: every stage job of the sweep files given (default: sweeps/*.yaml; an Optuna sweep's trials started so
far included), and of every other sweep with results here whose file was not given, what it last planned (its
membership: a sweep is never forgotten because its file is elsewhere; removing results/<sweep>/ forgets it)."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from workflow.cli.common import err, results_root
from workflow.errors import UserError
from workflow.results.gc import find, remove
from workflow.results.membership import members, recorded_sweeps
from workflow.design.recorded import add_recorded_runs
from workflow.sweep.expand import load_sweep
from workflow.sweep.spec import SweepError


def referenced_by(root: Path, sweep_files: list[str]) -> tuple[set[tuple[str, str]], list[str], list[str]]:
    """(the referenced stage jobs, the sweeps read from files, the sweeps kept by their recorded plan)."""
    keys: set[tuple[str, str]] = set()
    named = []
    for path in sweep_files:
        try:
            sweep = load_sweep(path)
        except SweepError as e:  # never guess: a sweep that does not load would have its stages listed as garbage
            raise UserError(f"{path} does not load, so gc cannot tell which stages it needs:\n{e}") from None
        add_recorded_runs(sweep, root)
        keys |= {(m.stage, m.stage_id) for m in sweep.members()}
        named.append(sweep.name)
    kept = [name for name in recorded_sweeps(root) if name not in named]
    for name in kept:
        keys |= set(members(root, name))
    return keys, named, kept


def cmd_gc(a) -> int:
    root = results_root(a)
    files = a.sweep_files or [str(p) for p in sorted(Path("sweeps").glob("*.yaml"))]
    if not files:
        raise UserError("no sweep files: name the sweeps whose stages to keep (rlsweep gc SWEEP.yaml ...)")
    keys, named, kept = referenced_by(root, files)
    garbage = find(root, keys)
    err.print(f"referenced: {len(named)} sweep file(s) ({', '.join(named)})"
              + (f"; kept by what they planned (no sweep file given): {', '.join(kept)}" if kept else ""))
    if not garbage.keys:
        err.print(f"{root}: every stage output is referenced; nothing to collect")
        return 0
    t = Table(title=f"{root}/_store: stage outputs no sweep references", title_justify="left")
    for col in ("stage", "id", "job", "size"):
        t.add_column(col, justify="right" if col == "size" else "left")
    for job in garbage.jobs:
        where = f"run {job.run_id}, step {job.step}, {job.group}" if job.stage == "eval" else ""
        t.add_row(job.stage, job.stage_id, where, _mb(garbage.sizes[job]))
    Console(highlight=False).print(t)
    rows_only = len(garbage.keys - {j.key for j in garbage.jobs})
    err.print(f"{len(garbage.jobs)} stage directories, {len(garbage.files)} table files"
              + (f", rows in {garbage.packs} pack(s)" if garbage.packs else "")
              + (f" ({rows_only} stage job(s) with rows but no directory)" if rows_only else "")
              + f": {_mb(garbage.bytes)}")
    if not a.remove:
        err.print("nothing removed: `rlsweep gc --remove` deletes them (after asking)")
        return 0
    if not a.yes:
        if not sys.stdin.isatty():
            raise UserError("--remove asks before deleting; without a terminal to ask at, add --yes")
        if input(f"delete these {len(garbage.keys)} stage jobs' outputs and rows? [y/N] ").strip().lower() != "y":
            err.print("nothing removed")
            return 1
    freed = remove(root, garbage)
    err.print(f"removed: {_mb(freed)} freed")
    return 0


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"
