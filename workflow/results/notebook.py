"""The tables from Python: a notebook's entry to what `rlsweep query` answers, with its guarantees.

    from workflow.results.notebook import sql
    scores = sql("select label, avg(avg_at_k) as acc from eval_scores group by label", results="results",
                 sweep="demo")
    scores.to_pandas()      # or .to_polars(), .to_arrow(); in Jupyter the answer shows itself as a table

The same read-only DuckDB over the same views as `rlsweep query` (workflow/results/catalog.py): nothing a statement
says can write, a damaged file is left out and warned about (`Answer.left_out`), and the query is bounded by a
time and a memory limit. pandas and polars are converted to only when asked, so neither is a dependency and
`rlsweep query` never loads them.
"""

from __future__ import annotations

import html
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from workflow.results.catalog import Catalog, Damaged, QueryLimits


@dataclass
class Answer:
    """A query's rows (Arrow), convertible in one call; in Jupyter it shows its first rows as a table."""

    table: pa.Table
    left_out: list[Damaged] = field(default_factory=list)  # files the views could not read

    def to_arrow(self) -> pa.Table:
        return self.table

    def to_pandas(self):
        try:
            import pandas  # noqa: F401  (pyarrow's conversion needs it; say so plainly when it is missing)
        except ImportError:
            raise ImportError("Answer.to_pandas() needs pandas: pip install pandas (or use .to_polars(), "
                              ".to_arrow())") from None
        return self.table.to_pandas()

    def to_polars(self):
        try:
            import polars
        except ImportError:
            raise ImportError("Answer.to_polars() needs polars: pip install polars (or use .to_pandas(), "
                              ".to_arrow())") from None
        return polars.from_arrow(self.table)

    def to_pylist(self) -> list[dict]:
        return self.table.to_pylist()

    @property
    def column_names(self) -> list[str]:
        return self.table.column_names

    def __len__(self) -> int:
        return self.table.num_rows

    def _repr_html_(self) -> str:  # Jupyter's rich display, without pandas
        shown = self.table.slice(0, 20).to_pylist()
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.table.column_names)
        rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r.values()) + "</tr>"
                       for r in shown)
        more = (f"<p>{self.table.num_rows} rows ({len(shown)} shown)</p>" if self.table.num_rows > len(shown)
                else "")
        return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>{more}"


def sql(query: str, results: str | Path = "results", sweep: str | None = None, timeout_s: float = 300.0,
        memory: str = "4GB") -> Answer:
    """Read-only SQL over the results' tables (one sweep's views with `sweep`): the views and limits of `rlsweep
    query`. A damaged file is left out with a warning naming it (and listed in `Answer.left_out`)."""
    catalog = Catalog(results, sweep)
    table = catalog.query(query, QueryLimits(timeout_s=timeout_s, memory=memory))
    left = catalog.left_out
    if left:
        warnings.warn(f"{len(left)} file(s) left out of the views, unreadable or no stage job's: "
                      + "; ".join(f"{d.path} ({d.reason})" for d in left[:5]) + " (`rlsweep doctor` says more)",
                      stacklevel=2)
    return Answer(table, list(left))
