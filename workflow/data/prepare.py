"""The data stage: a `datasets` task's training mixture, prepared once into `train.parquet` for every SFT and RL
stage that trains on it (its id is the hash of the data settings only, workflow/stages.py).

    load each set (Hub cache or local file) -> drop rows over the length limits -> drop repeated problems (within
    and across sets, first occurrence kept) -> take round(weight x rows) of each set (< 1: a random subset,
    > 1: whole copies plus a random part) -> shuffle -> the first `limit` rows

Every random draw comes from `task.seed`, so the same settings give the same file. Rows: id, source, problem,
answer, solution (null for sets without demonstrations); `stats.json` says what each step kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from workflow.atomic import write_json
from workflow.data import sources
from workflow.data.overlap import normalize_problem
from workflow.progress import say
from workflow.results.writer import write_parquet

ROWS = "train.parquet"
SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("problem", pa.string()), ("answer", pa.string()),
                    ("solution", pa.string())])


def mixture(task, examples: dict[str, list[sources.Example]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The prepared rows of `task` (a TaskConfig with datasets) from each set's examples, and per-set stats."""
    stats: dict[str, Any] = {}
    seen: set[str] = set()
    picked: list[dict[str, Any]] = []
    for index, src in enumerate(task.datasets):
        rows, s = [], {"loaded": len(examples[src.name]), "too_long": 0, "repeated": 0}
        for ex in examples[src.name]:
            if (task.max_prompt_chars and len(ex.problem) > task.max_prompt_chars) or (
                    task.max_solution_chars and ex.solution is not None
                    and len(ex.solution) > task.max_solution_chars):
                s["too_long"] += 1
                continue
            key = normalize_problem(ex.problem)
            if key in seen:
                s["repeated"] += 1
                continue
            seen.add(key)
            rows.append({"id": ex.id, "source": src.name, "problem": ex.problem, "answer": ex.answer,
                         "solution": ex.solution})
        take = int(round(src.weight * len(rows)))
        rng = np.random.default_rng([task.seed, index])
        whole, part = divmod(take, len(rows)) if rows else (0, 0)
        order = [*range(len(rows))] * whole + sorted(rng.choice(len(rows), size=part, replace=False).tolist())
        picked += [rows[i] for i in order]
        stats[src.name] = {**s, "kept": len(rows), "weight": src.weight, "taken": len(order)}
    order = np.random.default_rng([task.seed, len(task.datasets)]).permutation(len(picked))
    out = [picked[i] for i in order][: task.limit]
    return out, {"sets": stats, "rows": len(out)}


def prepare(task, out_dir: Path) -> Path:
    """Load, mix and write the rows of a `datasets` task into out_dir/train.parquet; returns its path. Every set
    is loaded (or reported missing, with the command to fetch it) before anything is written."""
    examples = {src.name: sources.load(src.name, path=src.path, revision=src.revision) for src in task.datasets}
    rows, stats = mixture(task, examples)
    if not rows:
        raise ValueError("task.datasets: no rows left after the length limits and the mixture weights")
    out_dir = Path(out_dir)
    path = write_parquet(pa.Table.from_pylist(rows, schema=SCHEMA), out_dir / ROWS)
    write_json(out_dir / "stats.json", stats)
    for name, s in stats["sets"].items():
        say(f"[bold cyan]data[/] {name}: {s['loaded']} loaded, {s['too_long']} over the length limits, "
            f"{s['repeated']} repeated, {s['taken']} taken (weight {s['weight']:g})")
    say(f"[bold cyan]data[/] {stats['rows']} training rows -> {path}")
    return path
