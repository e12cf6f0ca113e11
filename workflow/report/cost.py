"""The report's "Cost" section: per stage and RL method, the hours and GPU-hours the sweep's own jobs used, beside
what `rlsweep plan` estimated when the sweep first ran (workflow/sweep/plan.py cost_rows; `rlsweep status` prints
the same)."""

from __future__ import annotations

from workflow.report.tables import Cell, Section, Table
from workflow.sweep.plan import CostRow, cost_cells, cost_columns, on_gpus


def section(rows: list[CostRow], recorded_at: str | None) -> Section | None:
    if not rows:
        return None
    gpus = on_gpus(rows)
    table = Table(list(cost_columns(gpus)))
    for r in rows:
        table.rows.append([*map(Cell, cost_cells(r, gpus)[:-1]), Cell(r.flag or "", mark="failed" if r.flag else "")])
    table.notes.append("Used: the sweep's own jobs (not those it reused from another sweep), from their runs rows: "
                       + ("SLURM's GPU-hours where it accounted them (every attempt), else wall-clock x the GPUs the "
                          "job ran on" if gpus else "wall-clock hours on the CPU: no job ran on a GPU")
                       + ". Planned: `rlsweep plan` when the sweep first ran"
                       + (f" ({recorded_at})" if recorded_at else " (not recorded: the sweep ran before plans were)")
                       + "; from measured jobs of the same shape, or time limits (at most: an upper bound). Estimate "
                       "now: used + the plan's estimate of what is left, once the store has measured the stage's "
                       "shapes. Flagged: a stage over twice its plan, or finished under half a measured one.")
    return Section("Cost: planned against used", "cost", [table])
