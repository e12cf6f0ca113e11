"""Datasets read the same way whether they come from the Hugging Face cache (by id, config, split, revision) or
from a local .jsonl / .json / .parquet file in the dataset's own fields: records -> a normaliser -> our items.
Used by the benchmark registry (workflow/benchmarks/catalog.py) and the training-set registry (workflow/data/).

A dataset that is neither in the cache nor given as a file fails at once with the command that fetches it on a
machine with internet (a login node), so a job never waits hours to find out.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class DatasetUnavailable(Exception):
    """A dataset that is neither in the local cache nor given as a file. The message says how to fix it."""


@dataclass(frozen=True)
class HubDataset:
    """Where a dataset lives on the Hub and which of its fields we read (named in error messages)."""

    hf_id: str
    config: str | None
    split: str
    fields: tuple[str, ...]


RECORD_SUFFIXES = (".jsonl", ".json", ".parquet")


def record_file_problem(path: str | Path) -> str | None:
    """Why `path` cannot be read as a dataset's records, or None. A relative path is read from the working
    directory (where Snakemake runs every job), like the sweep file's own path."""
    path = Path(path)
    if not path.is_file():
        return "file not found"
    if path.suffix not in RECORD_SUFFIXES:
        return f"unsupported file type (use {', '.join(RECORD_SUFFIXES)})"
    return None


def read_records(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    problem = record_file_problem(path)
    if problem:
        raise DatasetUnavailable(f"{path}: {problem}")
    if path.suffix == ".jsonl":
        with path.open() as f:
            return [json.loads(line) for line in f if line.strip()]
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        return data if isinstance(data, list) else data["data"]
    import pyarrow.parquet as pq  # .parquet: record_file_problem has refused any other suffix
    return pq.read_table(path).to_pylist()


def fetch_command(ds: HubDataset, revision: str | None = None) -> str:
    return (f"python -c \"import datasets; datasets.load_dataset('{ds.hf_id}'"
            + (f", '{ds.config}'" if ds.config else "") + f", split='{ds.split}'"
            + (f", revision='{revision}'" if revision else "") + ")\"")


def hub_records(ds: HubDataset, revision: str | None, *, what: str, path_key: str,
                note: str = "") -> list[dict[str, Any]]:
    """The split's records from the Hugging Face cache. `what` names the dataset's use in messages ("benchmark
    math500"), `path_key` the sweep key that points it at a local file instead."""
    how = (f"{what}: dataset {ds.hf_id}" + (f" ({ds.config})" if ds.config else "")
           + f", split {ds.split}, is not available here. Either fetch it into the Hugging Face cache on a machine "
           f"with internet (a login node), with the same HF_HOME as the jobs "
           f"(now {os.environ.get('HF_HOME', '~/.cache/huggingface')}):\n    {fetch_command(ds, revision)}\n"
           f"or point {path_key} at a local .jsonl/.parquet file with the fields {', '.join(ds.fields)}."
           + (f"\nNote: {note}" if note else ""))
    try:
        import datasets
    except ImportError:
        raise DatasetUnavailable(how + "\n(The `datasets` package is not installed: pip install -e '.[eval]'.)") \
            from None
    try:
        rows = datasets.load_dataset(ds.hf_id, ds.config, split=ds.split, revision=revision)
    except Exception as e:  # noqa: BLE001 - offline, gated, missing: all mean "not available here"
        raise DatasetUnavailable(f"{how}\n(datasets said: {type(e).__name__}: {str(e).splitlines()[0][:300]})") \
            from None
    return list(rows)


def normalized(records: list[dict[str, Any]], normalize: Callable[[dict[str, Any], int], T],
               keep: Callable[[dict[str, Any]], bool], *, what: str, source: str,
               fields: tuple[str, ...]) -> list[T]:
    """`normalize(record, index)` of every kept record; a record without the expected fields names itself."""
    out = []
    for i, r in enumerate(records):
        if not keep(r):
            continue
        try:
            out.append(normalize(r, i))
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise DatasetUnavailable(f"{what}: record {i} of {source} does not have the expected fields "
                                     f"{', '.join(fields)} ({type(e).__name__}: {e})") from None
    if not out:
        raise DatasetUnavailable(f"{what}: no items in {source}")
    return out
