"""report.md and index.html from the same tables and figures (Jinja2 templates in templates/). The HTML is
self-contained: styles inline, figures embedded as PNG data, so it opens from a file:// URL after an rsync."""

from __future__ import annotations

import base64

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape

from workflow.report.tables import Table


def md_table(table: Table) -> str:
    def cell(c) -> str:
        text = c.text.replace("|", "\\|")
        return f"**{text}**" if c.mark else text
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines)


def html_table(table: Table, name: str) -> Markup:
    head = "".join(f"<th>{escape(c)}</th>" for c in table.columns)
    body = []
    for row in table.rows:
        cells = "".join(f'<td class="{c.mark}" title="{escape(c.note)}">{escape(c.text)}</td>' for c in row)
        body.append(f"<tr>{cells}</tr>")
    table = f'<table id="{escape(name)}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    return Markup(f'<div class="wide">{table}</div>')  # a wide table scrolls, the page does not


def environment() -> Environment:
    env = Environment(loader=PackageLoader("workflow.report", "templates"), undefined=StrictUndefined,
                      autoescape=lambda name: bool(name) and name.endswith(".html.j2"), keep_trailing_newline=True)
    env.globals.update(md_table=md_table, html_table=html_table)
    return env


def render(context: dict) -> tuple[str, str]:
    """(report.md, index.html) for a report's context (build.py)."""
    env = environment()
    images = {f.name: base64.b64encode(f.png.read_bytes()).decode() for f in context["figures"]}
    return (env.get_template("report.md.j2").render(**context),
            env.get_template("report.html.j2").render(images=images, **context))
