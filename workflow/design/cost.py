"""What a design's rounds cost, priced by the plan's estimates (workflow/sweep/plan.py): measured per-step costs of
finished jobs of the same shape anywhere in the store, else the stages' time limits (an upper bound), said as such.

GPU-hours where the jobs will use GPUs (the stages' asks on SLURM, the GPUs this machine has when it runs here:
workflow/sweep/executor.py); where none will (a CPU machine) the same figures in hours, so a budget still means
something there. Jobs already done cost nothing: a round whose seeds an earlier sweep trained is free.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workflow.sweep.expand import Run, Sweep


@dataclass(frozen=True)
class Price:
    hours: float  # GPU-hours (or hours where no stage asks a GPU: `unit`)
    unit: str  # "GPU-hours" | "hours"
    measured: int  # jobs priced from finished jobs
    bounded: int  # jobs priced at their time limit (an upper bound)
    jobs: int  # jobs to run

    @property
    def basis(self) -> str:
        if not self.jobs:
            return "nothing to run"
        if not self.bounded:
            return "measured"
        if not self.measured:
            return "from time limits: an upper bound"
        return f"measured for {self.measured} job(s), time limits for {self.bounded}: an upper bound"

    def text(self) -> str:
        return f"{_short(self.hours)} {self.unit} ({self.basis})"


def unit_of(sweep: Sweep, root: str | Path) -> str:
    """GPU-hours where a training or eval job will use GPUs where the sweep runs; else hours (a CPU machine)."""
    from workflow.sweep.executor import executor_of, gpus_used
    from workflow.sweep.plan import asked_gpus
    executor = executor_of(root, sweep.name)
    return ("GPU-hours" if any(gpus_used(asked_gpus(sweep, s), executor) > 0 for s in ("sft", "rl", "eval"))
            else "hours")


def price(sweep: Sweep, runs: list[Run], root: str | Path) -> Price:
    """The plan's estimate of running `runs` (their SFT, RL and eval jobs not done yet)."""
    from workflow.sweep.plan import plan  # (the catalog: DuckDB, only when a price is asked)
    part = Sweep(name=sweep.name, path=sweep.path, spec=sweep.spec, runs=list(runs))
    stages = plan(part, Path(root))
    on_gpus = unit_of(sweep, root) == "GPU-hours"
    todo = sum(sum(p.counts.values()) - p.counts["done"] for p in stages)
    return Price(hours=sum(p.gpu_hours if on_gpus else p.hours for p in stages),
                 unit="GPU-hours" if on_gpus else "hours", measured=sum(p.measured for p in stages),
                 bounded=sum(p.bounded for p in stages), jobs=todo)


def spent(sweep: Sweep, root: str | Path, unit: str) -> float:
    """What the sweep's own jobs have spent so far, in `unit` (plan.used: SLURM's GPU-hours where it accounted
    them, else wall-clock x the GPUs asked)."""
    from workflow.results.catalog import Catalog
    from workflow.sweep.plan import used
    totals = [u for u in used(sweep, Catalog(Path(root), sweep.name, planned=sweep.members())) if u.method is None]
    return sum(u.gpu_hours if unit == "GPU-hours" else u.hours for u in totals)


def _short(h: float) -> str:
    return "0" if h == 0 else f"{h:.2g}" if h < 0.1 else f"{h:.3g}"
