"""What a design of seeds on demand decided, as a table: the catalog's view `decisions`.

After each round the design's driver (workflow/design/driver.py) writes results/<sweep>/design/decisions/
round_<r>.parquet: one row per pair the round's look tested, with the verdict (larger / smaller / equal / continue,
or `undecided (budget)` when the budget ended the design), the test's statistic and boundary, the level spent so
far, and the seeds and values of each side the look saw. `rlsweep query "select * from decisions"` reads them.

A file is written whole (workflow/results/writer.py, with its digest) once its look is done; the driver's round
records (results/<sweep>/design/rounds/) hold the same values, so a damaged file is written again from them by the
next driver (`snakemake` of the sweep) and is left out of the view, reported, meanwhile.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from workflow.layout import SWEEP_NAME, decisions_dir
from workflow.results import digest
from workflow.results.files import UNREADABLE, arrow_file
from workflow.results.writer import write_parquet

DECISIONS = pa.schema([
    ("sweep", pa.string()), ("round", pa.int32()), ("rounds", pa.int32()), ("family", pa.string()),
    ("a", pa.string()), ("b", pa.string()), ("verdict", pa.string()),
    ("decided_at", pa.int32()),  # the round the pair was decided at (null while it continues)
    ("mean_a", pa.float64()), ("mean_b", pa.float64()), ("difference", pa.float64()),
    ("statistic", pa.float64()), ("boundary", pa.float64()), ("spent", pa.float64()), ("error", pa.float64()),
    ("seeds_a", pa.list_(pa.int64())), ("seeds_b", pa.list_(pa.int64())),
    ("values_a", pa.list_(pa.float64())), ("values_b", pa.list_(pa.float64())),
    ("run_ids_a", pa.list_(pa.string())), ("run_ids_b", pa.list_(pa.string())),
    ("gpu_hours", pa.float64()),  # the design's GPU-hours spent up to this round (hours where no stage asks a GPU)
])


def path_of(results_root: str | Path, sweep: str, round_: int) -> Path:
    return decisions_dir(results_root, sweep) / f"round_{round_:03d}.parquet"


def write(results_root: str | Path, sweep: str, round_: int, rows: list[dict]) -> Path:
    path = path_of(results_root, sweep, round_)
    write_parquet(pa.Table.from_pylist([{"sweep": sweep, "round": round_, **r} for r in rows], schema=DECISIONS),
                  path)
    return path


def decision_files(results_root: str | Path, sweep: str | None = None) -> list[Path]:
    """The decisions files of one sweep, or of every sweep of the results directory."""
    if sweep is not None:
        return sorted(decisions_dir(results_root, sweep).glob("round_*.parquet"))
    return sorted(p for p in Path(results_root).glob("*/design/decisions/round_*.parquet")
                  if SWEEP_NAME.fullmatch(p.parents[2].name))


def damage(path: Path, deep: bool = True) -> str | None:
    """Why a decisions file does not read (None: it reads); its digest checked in full (a few KB)."""
    try:
        with arrow_file(path) as f:
            if deep:
                table = pq.ParquetFile(f).read()
                names = table.column_names
            else:
                names = pq.read_schema(f).names
        missing = set(DECISIONS.names) - set(names)
        if missing:
            return f"not a decisions file: no column {', '.join(sorted(missing))}"
        verdict = digest.check_path(path)
        if not verdict.ok:
            return verdict.reason
    except UNREADABLE as e:
        return str(e).strip().rstrip(".") or type(e).__name__
    return None
