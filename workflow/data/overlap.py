"""How much of each evaluated benchmark is in the training data: a problem counts when its text equals a training
problem's after normalisation (case, white space and `$` signs ignored), the usual exact-match decontamination
check. MATH-500, for one, is drawn from MATH's test split: MATH's training split must not contain it.

The overlap stage writes the report (report.json: per benchmark, problems, overlapping problems, fraction, a few
ids); the SFT and RL stages refuse to train when a fraction is above the sweep's `checks.max_train_overlap`.
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from workflow.atomic import write_json
from workflow.benchmarks import catalog
from workflow.progress import say

REPORT = "report.json"
_SPACE = re.compile(r"\s+")


def normalize_problem(text: str) -> str:
    return _SPACE.sub("", unicodedata.normalize("NFKC", text).lower().replace("$", ""))


class TrainOverlap(RuntimeError):
    """Training data that contains more of an evaluated benchmark than the sweep allows."""


def overlap(train_problems: list[str], items: dict[str, list[catalog.Item]]) -> dict[str, dict[str, Any]]:
    train = {normalize_problem(p) for p in train_problems}
    report = {}
    for name, its in items.items():
        hits = [it.id for it in its if normalize_problem(it.question) in train]
        report[name] = {"problems": len(its), "overlap": len(hits), "fraction": len(hits) / len(its) if its else 0.0,
                        "examples": hits[:5]}
    return report


def check(rows: Path, names: list[str], paths: dict[str, str], revisions: dict[str, str], out_dir: Path) -> Path:
    """Write the overlap report of the prepared rows against the benchmarks `names`; returns its path."""
    items = {n: catalog.load(n, path=paths.get(n), revision=revisions.get(n)) for n in names}
    report = overlap(pq.read_table(rows, columns=["problem"]).column("problem").to_pylist(), items)
    path = write_json(Path(out_dir) / REPORT, report)
    for name, r in report.items():
        say(f"[bold cyan]overlap[/] {name}: {r['overlap']}/{r['problems']} problems in the training data "
            f"({100 * r['fraction']:.1f}%)" + (f", e.g. {', '.join(r['examples'][:3])}" if r["overlap"] else ""))
    return path


def enforce(reports: list[Path], max_fraction: float | None) -> None:
    """Refuse (TrainOverlap) when a benchmark's overlap fraction in any report is above `max_fraction`."""
    if max_fraction is None:
        return
    for path in reports:
        for name, r in json.loads(Path(path).read_text()).items():
            if r["fraction"] > max_fraction:
                raise TrainOverlap(f"{r['overlap']} of {r['problems']} problems of benchmark {name} "
                                   f"({100 * r['fraction']:.2f}%) are in the training data, above "
                                   f"checks.max_train_overlap = {max_fraction}: e.g. {', '.join(r['examples'])} "
                                   f"(report: {path}). Remove them from the data, or raise the limit.")
