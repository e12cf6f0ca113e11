"""A snapshot (snapshot.py) as the terminal shows it: a rich table for the live view, plain aligned text without a
TTY (`--once`: cron, scripts, logs). Both have the same columns, header, and footer of newest problems.

When there are more runs than lines, the seeds of each setting fold into one line (its seeds' most urgent state, the
slowest one's step, the mean of their metrics and evaluations). `sort` orders the lines by a column.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import replace
from statistics import mean

from rich.console import Group
from rich.table import Table
from rich.text import Text

from workflow.watch.snapshot import RunLine, Snapshot

STYLE = {"pending": "dim", "queued": "yellow", "running": "cyan", "failed": "bold red", "done": "green"}
URGENCY = {"failed": 4, "running": 3, "queued": 2, "pending": 1, "done": 0}
BASE_COLUMNS = ("run", "seed", "state", "stage", "seg", "step", "s/step", "eta", "eval")
PROBLEMS_SHOWN = 5


def _duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return ""
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _number(v: float | None) -> str:
    if v is None:
        return ""
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def metric_names(lines: list[RunLine]) -> list[str]:
    """The metric columns: every headline number some line has, in the order first seen."""
    return list(dict.fromkeys(n for line in lines for n in line.metrics))


def cells(line: RunLine, metrics: list[str]) -> dict[str, str]:
    step = "" if line.step is None else f"{line.step}/{line.total}" if line.total else str(line.step)
    ev = "" if line.eval is None else f"{line.eval:.3f}@{line.eval_step}"
    return {"run": line.label, "seed": str(line.seed), "state": line.state, "stage": line.stage,
            "seg": line.segment, "step": step, "s/step": _number(line.s_per_step), "eta": _duration(line.eta_s),
            "eval": ev, **{m: _number(line.metrics.get(m)) for m in metrics}, "detail": line.detail}


def sort_key(column: str, metrics: list[str]):
    """How --sort orders lines by `column` (a base column or a metric name); missing values last."""
    if column not in (*BASE_COLUMNS, *metrics, "detail"):
        raise ValueError(f"--sort {column!r}: one of {', '.join([*BASE_COLUMNS, *metrics, 'detail'])}")
    value = {"run": lambda ln: ln.label, "seed": lambda ln: ln.seed, "state": lambda ln: -URGENCY[ln.state],
             "stage": lambda ln: ln.stage, "seg": lambda ln: ln.segment, "step": lambda ln: ln.step,
             "s/step": lambda ln: ln.s_per_step, "eta": lambda ln: ln.eta_s, "eval": lambda ln: ln.eval,
             "detail": lambda ln: ln.detail}.get(column, lambda ln: ln.metrics.get(column))
    return lambda ln: (value(ln) is None, value(ln) if value(ln) is not None else 0)


def fold(lines: list[RunLine]) -> list[RunLine]:
    """One line per setting (label): its seeds folded."""
    groups: dict[str, list[RunLine]] = {}
    for line in lines:
        groups.setdefault(line.label, []).append(line)
    out = []
    for label, group in groups.items():
        if len(group) == 1:
            out.append(group[0])
            continue
        worst = max(group, key=lambda ln: (URGENCY[ln.state], -(ln.step or 0)))
        states = {s: sum(ln.state == s for ln in group) for s in URGENCY}
        summary = ", ".join(f"{n} {s}" for s, n in states.items() if n)
        steps = [ln.step for ln in group if ln.step is not None]
        evaluated = [ln for ln in group if ln.eval is not None]
        last = max((ln.eval_step for ln in evaluated), default=None)
        evals = [ln.eval for ln in evaluated if ln.eval_step == last]  # the seeds evaluated at the last step
        metrics = {n: mean(v) for n in metric_names(group)
                   if (v := [ln.metrics[n] for ln in group if n in ln.metrics])}
        rates = [ln.s_per_step for ln in group if ln.s_per_step is not None]
        out.append(replace(worst, seed=f"x{len(group)}", step=min(steps) if steps else None, metrics=metrics,
                           eval=mean(evals) if evals else None, eval_step=last, s_per_step=max(rates) if rates else None,
                           detail=summary + (f"; {worst.detail}" if worst.detail else "")))
    return out


def arrange(snapshot: Snapshot, max_lines: int | None = None, sort: str | None = None) -> list[RunLine]:
    """The lines shown: folded by setting when there are more runs than `max_lines`, then sorted."""
    lines = snapshot.lines
    if max_lines is not None and len(lines) > max_lines:
        lines = fold(lines)
    if sort:
        lines = sorted(lines, key=sort_key(sort, metric_names(lines)))
    return lines


def header(snapshot: Snapshot) -> str:
    j = snapshot.jobs
    when = dt.datetime.fromtimestamp(snapshot.taken_at).strftime("%H:%M:%S")
    return (f"{snapshot.sweep}: {len(snapshot.lines)} runs | jobs {j['done']} done, {j['running']} running, "
            f"{j['queued']} queued, {j['failed']} failed, {j['pending']} pending | "
            + used_text(snapshot) + (f" | {snapshot.eta.text(snapshot.taken_at)}" if snapshot.eta else "")
            + f" | {when}")


def used_text(snapshot: Snapshot) -> str:
    """GPU-hours used (of planned) where the sweep is on GPUs, plain hours on the CPU; "at most" for a plan from
    time limits."""
    gpus = snapshot.on_gpus
    used, planned = ((snapshot.gpu_hours, snapshot.planned_gpu_hours) if gpus
                     else (snapshot.hours, snapshot.planned_hours))
    return (f"{'GPU-hours' if gpus else 'hours'} {used:.1f}"
            + ("" if planned is None else
               f" of {'at most ' if snapshot.planned_bounded and planned else ''}{planned:.1f} planned"))


def footer(snapshot: Snapshot) -> list[str]:
    out = snapshot.design.splitlines() if snapshot.design else []
    for p in snapshot.problems[:PROBLEMS_SHOWN]:
        out.append(f"failed: {p.run}, {p.stage}: {p.reason}" + (f" (log: {p.log})" if p.log else ""))
    if len(snapshot.problems) > PROBLEMS_SHOWN:
        out.append(f"... and {len(snapshot.problems) - PROBLEMS_SHOWN} more failed jobs")
    return out + [f"note: {n}" for n in snapshot.notes]


def plain(snapshot: Snapshot, max_lines: int | None = None, sort: str | None = None) -> str:
    """The snapshot as aligned plain text."""
    lines = arrange(snapshot, max_lines, sort)
    metrics = metric_names(lines)
    columns = [*BASE_COLUMNS, *metrics, "detail"]
    rows = [dict(zip(columns, columns))] + [cells(ln, metrics) for ln in lines]
    widths = {c: max(len(r[c]) for r in rows) for c in columns}
    text = [header(snapshot)]
    text += ["  ".join(r[c].ljust(widths[c]) for c in columns).rstrip() for r in rows]
    return "\n".join(text + footer(snapshot)) + "\n"


def rich_view(snapshot: Snapshot, max_lines: int | None = None, sort: str | None = None) -> Group:
    """The snapshot as a rich renderable (rich.live.Live redraws it)."""
    lines = arrange(snapshot, max_lines, sort)
    metrics = metric_names(lines)
    table = Table(title=header(snapshot), title_justify="left", expand=False, pad_edge=False)
    for c in (*BASE_COLUMNS, *metrics, "detail"):
        table.add_column(c, no_wrap=c != "detail", justify="right" if c in ("step", "s/step", "eta", *metrics)
                         else "left")
    for ln in lines:
        row = cells(ln, metrics)
        row["state"] = Text(row["state"], style=STYLE[ln.state])
        table.add_row(*row.values())
    problems = [Text(line, style="red" if line.startswith("failed") else "dim") for line in footer(snapshot)]
    return Group(table, *problems)
