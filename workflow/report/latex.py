"""The report's tables for a paper: LaTeX (booktabs) and CSV, one file each per table under report/exports/.

The same cells as report.md and index.html (tables.py): a cell the report marks (the best of its column, a failed
run) is bold; "mean ± std" stays as it reads, ± as $\\pm$. A table's notes are a LaTeX comment above it (the caption
is the paper's to write). CSV: the cells' text, marks dropped.
"""

from __future__ import annotations

import csv
import io

from workflow.report.tables import Table

# LaTeX's special characters first (the backslash before the others: their escapes hold one), then the few
# non-ASCII signs the report's cells use, as math
_ESCAPES = [("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"), ("_", r"\_"),
            ("{", r"\{"), ("}", r"\}"), ("~", r"\textasciitilde{}"), ("^", r"\textasciicircum{}")]
_SIGNS = {"±": r"$\pm$", "−": r"$-$", "—": "---", "–": "--", "×": r"$\times$", "≤": r"$\leq$", "≥": r"$\geq$",
          "→": r"$\rightarrow$"}


def escape(text: str) -> str:
    out = text
    for raw, escaped in _ESCAPES:
        out = out.replace(raw, escaped if raw != "\\" else "\0")
    out = out.replace("\0", r"\textbackslash{}")
    return "".join(_SIGNS.get(ch, ch) for ch in out)


def latex_table(table: Table) -> str:
    """A booktabs tabular: \\toprule, the header, \\midrule, one line per row, \\bottomrule (needs \\usepackage{
    booktabs})."""
    def cell(c) -> str:
        text = escape(c.text)
        return rf"\textbf{{{text}}}" if c.mark else text
    lines = [f"% {escape(n)}".replace("\n", " ") for n in table.notes]  # (a comment ends at its line)
    lines += [r"\begin{tabular}{" + "l" * len(table.columns) + "}", r"\toprule",
              " & ".join(escape(c) for c in table.columns) + r" \\", r"\midrule"]
    lines += [" & ".join(cell(c) for c in row) + r" \\" for row in table.rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def csv_table(table: Table) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(table.columns)
    w.writerows([c.text for c in row] for row in table.rows)
    return buf.getvalue()
