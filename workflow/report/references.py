"""The published results of the papers behind rlsweep's methods (references/published.yaml), read, checked and
laid out beside a sweep's measured accuracies.

The file records percents as printed; here they are fractions, like the report's own accuracies. check() recomputes
each printed average: a paper's average is only comparable to the report's "Avg math" / "Avg OOD" when it is over
the same benchmarks, and a printed average that is not the mean of its own columns means a misread (or misprinted)
number somewhere in the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from workflow.errors import UserError
from workflow.benchmarks.catalog import BUILTIN, MATH_SET, OOD_SET, REGISTRY
from workflow.report.tables import Cell, Table, fmt

# the synthetic benchmarks (arithmetic, word_problems) are rlsweep's own: no paper reports them
# the catalogue's order (the built-ins as listed, then any a package adds)
CATALOGUE = tuple(dict.fromkeys([*(b.name for b in BUILTIN), *REGISTRY]))
BENCHMARKS = tuple(name for name in CATALOGUE if not REGISTRY[name].synthetic)
REQUIRED = ("paper", "source", "model", "method", "decoding", "values", "stated", "note")
OPTIONAL = ("stated_over", "stated_with")
SETS = {"math": MATH_SET, "ood": OOD_SET}
GROUP_WORDS = {"math": "a math benchmark", "ood": "out-of-distribution", "extra": "in neither set"}


@dataclass(frozen=True)
class Reference:
    """One published row."""
    paper: str
    title: str
    citation: str
    source: str
    model: str
    method: str
    decoding: str
    values: dict[str, float]  # benchmark -> fraction (printed percent / 100)
    stated: dict[str, float]  # printed average column -> fraction
    stated_over: dict[str, tuple[str, ...]]  # printed average column -> the benchmarks the paper says it averages
    note: str
    # the sources of the rows (same paper, model, method) whose cells the printed averages also cover: a table that
    # prints one row per method over several budgets (GXPO's Tables 3 and 4) is one row here per budget
    stated_with: tuple[str, ...] = ()

    def over(self, column: str) -> tuple[str, ...]:
        """The benchmarks a printed average covers: as the paper says, else all of the row's."""
        return self.stated_over.get(column, tuple(self.values))


class ReferenceError(UserError):
    pass


def _fractions(value, where: str, names: tuple[str, ...] | None) -> dict[str, float]:
    """A {name: percent} mapping as fractions; `names`: the names allowed (None: any)."""
    if not isinstance(value, dict):
        raise ReferenceError(f"{where}: a mapping of name: percent, got {value!r}")
    for key, v in value.items():
        if names is not None and key not in names:
            raise ReferenceError(f"{where}: unknown benchmark {key!r}; known: {', '.join(names)}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 100:
            raise ReferenceError(f"{where}.{key}: {v!r} is not a percent (a number in [0, 100])")
    return {str(key): v / 100 for key, v in value.items()}


def _reference(row, where: str, papers: dict) -> Reference:
    if not isinstance(row, dict):
        raise ReferenceError(f"{where}: a mapping with keys {', '.join(REQUIRED)}, got {row!r}")
    unknown = [k for k in row if k not in REQUIRED + OPTIONAL]
    missing = [k for k in REQUIRED if k not in row]
    if unknown or missing:
        key = (unknown or missing)[0]
        raise ReferenceError(f"{where}: {'unknown' if unknown else 'missing'} key {key!r}; "
                             f"keys: {', '.join(REQUIRED + OPTIONAL)} (stated_over optional)")
    if row["paper"] not in papers:
        raise ReferenceError(f"{where}: paper {row['paper']!r} is not declared under papers: "
                             f"({', '.join(papers)})")
    values = _fractions(row["values"], f"{where}: values", BENCHMARKS)
    stated = _fractions(row["stated"] or {}, f"{where}: stated", None)
    over = row.get("stated_over") or {}
    if not isinstance(over, dict):
        raise ReferenceError(f"{where}: stated_over: a mapping of column: [benchmarks], got {over!r}")
    for column, names in over.items():
        if column not in stated:
            raise ReferenceError(f"{where}: stated_over.{column}: no such stated column ({', '.join(stated)})")
        absent = [n for n in names or [] if n not in values]
        if not names or absent:
            raise ReferenceError(f"{where}: stated_over.{column}: {absent or 'empty'}: not in the row's values "
                                 f"({', '.join(values)})")
    with_ = row.get("stated_with") or []
    if not isinstance(with_, list) or not all(isinstance(x, str) for x in with_):
        raise ReferenceError(f"{where}: stated_with: a list of the sources of rows its averages also cover")
    return Reference(paper=row["paper"], title=papers[row["paper"]]["title"],
                     citation=papers[row["paper"]]["reference"], source=str(row["source"]), model=str(row["model"]),
                     method=str(row["method"]), decoding=str(row["decoding"]), values=values, stated=stated,
                     stated_over={c: tuple(n) for c, n in over.items()}, note=str(row["note"]),
                     stated_with=tuple(with_))


def problem(path: str | Path, papers: list[str] | None = None, models: list[str] | None = None) -> str | None:
    """Why the sweep's `report.references` entry cannot be used (read and validated as the report will), or None:
    the sweep file's check of the block (workflow/sweep/spec.py BLOCK_CHECKS)."""
    try:
        load(path, papers, models)
    except ReferenceError as e:
        return str(e)
    return None


def load(path: str | Path, papers: list[str] | None = None, models: list[str] | None = None) -> list[Reference]:
    """Read and validate a references file; `papers` / `models`: keep only those rows."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ReferenceError(f"{path}: cannot read references: {e}") from None
    if not isinstance(data, dict) or set(data) != {"papers", "results"}:
        raise ReferenceError(f"{path}: the top level must have exactly the keys papers, results")
    declared = data["papers"] or {}
    for key, paper in declared.items():
        if not isinstance(paper, dict) or set(paper) != {"title", "reference"}:
            raise ReferenceError(f"{path}: papers.{key}: exactly the keys title, reference")
    refs = []
    for i, row in enumerate(data["results"] or []):
        name = f"{row.get('paper')} / {row.get('method')}" if isinstance(row, dict) else "?"
        refs.append(_reference(row, f"{path}: results[{i}] ({name})", declared))
        missing = [s for s in refs[-1].stated_with if _sibling(refs, refs[-1], s) is None]
        if missing:
            raise ReferenceError(f"{path}: results[{i}] ({name}): stated_with: no earlier row of {refs[-1].paper} "
                                 f"{refs[-1].model} {refs[-1].method} has source {missing[0]!r}")
    for wanted, choices, what in ((papers, list(declared), "paper"),
                                  (models, list(dict.fromkeys(r.model for r in refs)), "model")):
        for w in wanted or []:
            if w not in choices:
                raise ReferenceError(f"{path}: no {what} {w!r}; {what}s: {', '.join(choices)}")
    return [r for r in refs if (papers is None or r.paper in papers) and (models is None or r.model in models)]


@dataclass(frozen=True)
class Flag:
    reference: Reference
    column: str
    kind: str  # "mismatch" | "other set"
    message: str


def _mean(values: dict[str, float], names) -> float:
    return sum(values[n] for n in names) / len(names)


def _sibling(refs: list[Reference], r: Reference, source: str) -> Reference | None:
    """The row of `r`'s paper, model and method printed under `source` (a stated_with entry)."""
    return next((x for x in refs if (x.paper, x.model, x.method, x.source) == (r.paper, r.model, r.method, source)),
                None)


def _cells(refs: list[Reference], r: Reference, names: tuple[str, ...]) -> list[float]:
    """The cells a printed average of `r` covers: its own over `names`, and its stated_with rows' over the same."""
    rows = [r, *(x for x in (_sibling(refs, r, s) for s in r.stated_with) if x is not None)]
    return [row.values[n] for row in rows for n in names if n in row.values]


def _other_set(column: str, names: tuple[str, ...]) -> str:
    """What an average over `names` has and lacks against the nearer of the seeds' two sets."""
    group = max(SETS, key=lambda g: len(set(SETS[g]) & set(names)))
    extra = [f"{n} is {GROUP_WORDS.get(REGISTRY[n].group, 'in neither set')}" for n in names if n not in SETS[group]]
    missing = [n for n in SETS[group] if n not in names]
    said = "; ".join(extra + ([f"{', '.join(missing)} missing"] if missing else []))
    return (f"{column} averages {', '.join(names)}: not the {len(SETS[group])} "
            f"{'math' if group == 'math' else 'out-of-distribution'} benchmarks ({said})")


def check(refs: list[Reference], tolerance: float = 0.0007) -> list[Flag]:
    """Each printed average against the mean of the columns it says it covers ("mismatch": off by more than
    `tolerance`, a fraction: 0.07 points allows for the rounding of printed numbers), and against the seeds' sets
    ("other set": over neither MATH_SET, OOD_SET, nor a set the paper's main table averages over).

    A paper's main table is its first row with printed averages (in the order given, i.e. the file's): a paper
    whose own benchmark suite differs from the seeds' (GXPO) is not flagged on every row, while a later table
    that averages over a different subset than the paper's headline numbers is. Give check() all of a paper's
    rows (no `models` filter), or its later tables lose that main table."""
    main: dict[str, set[frozenset]] = {}
    for r in refs:
        if r.stated and r.paper not in main:
            main[r.paper] = {frozenset(r.over(c)) for c in r.stated}
    accepted = {frozenset(MATH_SET), frozenset(OOD_SET)}
    flags = []
    for r in refs:
        for column, stated in r.stated.items():
            names = r.over(column)
            cells = _cells(refs, r, names)
            mean = sum(cells) / len(cells)
            if abs(mean - stated) > tolerance:
                budgets = [x.rsplit(", ", 1)[-1] for x in (*r.stated_with, r.source)]  # "Table 4 ..., 8h" -> "8h"
                over = ", ".join(names) + (f" at {', '.join(budgets)}" if r.stated_with else "")
                flags.append(Flag(r, column, "mismatch",
                                  f"stated {column} {100 * stated:.2f} is not the mean of its own {len(cells)} "
                                  f"cells over {over} ({100 * mean:.2f})"))
            if frozenset(names) not in accepted | main[r.paper]:
                flags.append(Flag(r, column, "other set", _other_set(column, names)))
    return flags


def _columns(benchmarks: set[str]) -> list[str]:
    known = [n for n in (*MATH_SET, *OOD_SET, *CATALOGUE) if n in benchmarks]
    return list(dict.fromkeys(known)) + sorted(benchmarks - set(known))


def _math_avg(values: dict[str, float]) -> str:
    return fmt(_mean(values, MATH_SET)) if all(n in values for n in MATH_SET) else "—"


def table(refs: list[Reference], measured: dict[str, dict[str, float]] | None = None,
          flags: list[Flag] = ()) -> Table:
    """The published rows beside the sweep's measured settings (first), one column per benchmark either has."""
    measured = measured or {}
    benchmarks = _columns({n for r in refs for n in r.values} | {n for m in measured.values() for n in m})
    out = Table(["paper", "source", "model", "method", *benchmarks, "avg (recomputed)", "stated avg"])
    for setting, values in measured.items():
        out.rows.append([Cell(f"measured: {setting}"), Cell("this sweep"), Cell("—"), Cell("—"),
                         *(Cell(fmt(values.get(n))) for n in benchmarks), Cell(_math_avg(values)), Cell("—")])
    for r in refs:
        mine = [f for f in flags if f.reference == r]  # equality: flags from another load() of the file count
        stated = "; ".join(f"{c} {fmt(v)}" for c, v in r.stated.items()) or "—"
        why = [f"{c}: printed {100 * v:g} over {', '.join(r.over(c))}" for c, v in r.stated.items()]
        out.rows.append([Cell(r.paper, note=f"{r.title} ({r.citation})"), Cell(r.source, note=r.decoding),
                         Cell(r.model), Cell(r.method, note=r.note),
                         *(Cell(fmt(r.values.get(n))) for n in benchmarks), Cell(_math_avg(r.values)),
                         Cell(stated, mark="failed" if mine else "",
                              note="; ".join([f.message for f in mine] + why))])
    out.notes.append("Published numbers are the papers' printed percents / 100 (their own decoding and sampling: "
                     "hover over the source). avg (recomputed): the mean over the seeds' Avg math set, "
                     f"{', '.join(MATH_SET)}, for rows that have all {len(MATH_SET)}; else —. stated avg: the "
                     "paper's printed average(s), each over its own benchmarks:")
    sets: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}
    for r in refs:
        for c in r.stated:
            sources = sets.setdefault((r.paper, c, r.over(c)), [])
            sources += [r.source] if r.source not in sources else []
    out.notes += [f"{paper} {', '.join(sources)}: {c} over {', '.join(names)}."
                  for (paper, c, names), sources in sets.items()]
    said: dict[tuple[str, str, str], list[str]] = {}  # one note per table and message, naming its rows
    for f in flags:
        if f.reference in refs:
            said.setdefault((f.reference.paper, f.reference.source, f"{f.kind}: {f.message}"), []).append(
                f"{f.reference.model} {f.reference.method}")
    out.notes += [f"Flagged, {paper} {source} ({', '.join(rows)}): {message}."
                  for (paper, source, message), rows in said.items()]
    return out
