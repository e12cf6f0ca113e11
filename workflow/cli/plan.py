"""`rlsweep plan SWEEP.yaml`: per stage, the jobs done / partial / failed / running / new, what each job to run asks
of SLURM and the GPU-hours left (workflow/sweep/plan.py)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from workflow.cli.common import err, results_root
from workflow.errors import UserError
from workflow.extend import extensions
from workflow.design.recorded import add_recorded_runs
from workflow.sweep.executor import executor_of
from workflow.sweep.expand import load_sweep
from workflow.sweep.plan import STATES, plan


def cmd_plan(a) -> int:
    if a.detect is not None and not 0 < a.detect < 1:
        raise UserError(f"--detect: a difference of accuracy in (0, 1), e.g. 0.01, got {a.detect}")
    sweep = load_sweep(a.sweep_file)
    root = results_root(a)
    add_recorded_runs(sweep, root)  # a study's trials, a design's rounds: started so far
    if sweep.spec.optuna is not None:  # the study may still ask for more
        err.print("[yellow]an Optuna study: only the trials it has started so far are planned[/]")
    executor = executor_of(root, sweep.name, getattr(a, "on", None))
    stages = plan(sweep, root, executor)
    gpus = any(p.gpus for p in stages)  # (a CPU machine's jobs use none: their hours are plain hours)
    # whole words at 80 columns: the counts and hours in the table, what a job asks and where the hours come from
    # on a line of their own below it (as columns they wrapped every header into cut-off words)
    t = Table(title=f"{sweep.name}: {len(sweep.runs)} runs ({sweep.path}); results under {root}")
    for col in ("stage", *STATES, "hours left", *(("GPU-hours left",) if gpus else ())):
        t.add_column(col, justify="left" if col == "stage" else "right",
                     min_width=max(map(len, col.split())))
    notes, total = [], 0.0
    for p in stages:
        to_run = p.measured + p.bounded
        used = sum(len(jobs) for jobs in p.sources.values())
        where = ", ".join(f"{name}: {len(jobs)}" for name, jobs in sorted(p.sources.items()))
        measured = f"{p.measured} from {used} finished job{'s' * (used != 1)} of the same shape ({where})"
        source = (measured if not p.bounded else f"{p.bounded} from time limits (upper bound)" if not p.measured
                  else f"{measured}, {p.bounded} from time limits (upper bound)")
        t.add_row(p.stage, *[str(p.counts[s]) for s in STATES], _left(p.hours, p.bounded),
                  *((_left(p.gpu_hours, p.bounded),) if gpus else ()))
        if to_run:
            notes.append(f"{p.stage}: each job to run asks {p.asks}; hours of the {to_run} to run: {source}")
        if p.taken:
            notes.append(f"{p.stage}: {p.taken} steps taken from finished shorter runs, at no cost")
        if p.copies:
            notes.append(f"{p.stage}: {p.copies} evaluation(s) copied from another run's of the same model (a shared "
                         "start, a finished shorter run), at no cost: not counted as new")
        total += p.gpu_hours if gpus else p.hours
    out = Console(highlight=False)
    out.print(t)
    for line in notes:
        out.print(line, markup=False)
    for p in stages:  # the shared store: what this sweep takes from others instead of computing it
        if p.reused:
            err.print(f"{p.stage}: {sum(p.reused.values())} of the done jobs came from another sweep ("
                      + ", ".join(f"{n} from {name}" for name, n in sorted(p.reused.items())) + ")")
    _extensions(sweep, root)
    bound, measured = any(p.bounded for p in stages), any(p.measured for p in stages)
    err.print(f"runs on {executor.text()}")
    err.print(("at most " if bound else "") + f"{total:.2f} {'GPU-hours' if gpus else 'hours (on the CPU)'} left"
              + (" (some from time limits)" if bound else "")
              + ("; measured estimates leave out queueing" if measured else "")
              + "; run it with `snakemake --config sweep=" + sweep.path + "` (--profile slurm on a cluster)")
    if sweep.spec.design is not None:
        _design(sweep, root)
    if a.detect is not None:
        detect(sweep, root, a.detect)
    return 0


def _left(hours: float, bounded: int) -> str:
    """A stage's hours left, "at most" where some come from time limits (an upper bound)."""
    return ("at most " if bounded and hours else "") + f"{hours:.2f}"


def _design(sweep, root) -> None:
    """Seeds on demand: the table above holds the rounds recorded so far; what the next round, the worst case and
    the budget come to."""
    from workflow.design.cost import price
    from workflow.design.explain import budget_note, prices, worst_case_rounds
    from workflow.design.rounds import round_runs
    from workflow.design.status import design_state
    state = design_state(sweep, root)
    first, worst = prices(sweep, root)
    later = worst_case_rounds(sweep)[1:2]  # round 2 of every compared setting
    one = price(sweep, round_runs(sweep.spec, later[0]), root) if later else None
    err.print(f"seeds on demand ({state.looked} of {state.K} round(s) tested): round 1 costs {first.text()}"
              + (f"; a later round of every compared setting {one.text()}" if one else "")
              + f"; the worst case ({state.K} rounds) {worst.text()}")
    note = budget_note(sweep.spec.design, first, worst)
    if note:
        err.print(note)


def _extensions(sweep, root, most: int = 10) -> None:
    """The runs that take their first steps from a finished shorter run of the same settings (workflow/extend.py),
    and those that have one but train from step 0, with why."""
    can, cannot = extensions(root, sweep.runs)
    lines = [f"rl {e.run.run_id} ({e.run.label}, seed {e.run.config.seed}): extends the finished run {e.donor}; "
             f"steps 1-{e.last} taken, {e.last + 1}-{e.run.config.rl.steps} to train" for e in can]
    lines += [f"rl {run.run_id} ({run.label}, seed {run.config.seed}): trains from step 0, though the finished run "
              f"{donor} has the same settings but rl.steps: {why}" for run, donor, why in cannot]
    for line in lines[:most]:
        err.print(line, markup=False)
    if len(lines) > most:
        err.print(f"... and {len(lines) - most} more runs like these")


def detect(sweep, root, delta: float) -> None:
    """The seeds per setting each benchmark needs to detect `delta` (workflow/report/seeds.py)."""
    from workflow.report.build import planned_runs
    from workflow.report.queries import blocks, fill
    from workflow.report.seeds import plan_table, variances
    from workflow.results.catalog import Catalog
    sql = blocks(fill(planned_runs(sweep)))["seed_variance"]
    found = variances(Catalog(root, sweep.name, planned=sweep.members()).query(sql).to_pylist())
    if not found:
        raise UserError(f"--detect needs the spread between seeds: no setting of {sweep.name} has final evaluations "
                        "of two seeds yet")
    table = plan_table(found, delta)
    t = Table(title=f"seeds per setting to detect a difference of {delta:g} (80% power, 5% level, two-sided)")
    for col in table.columns:
        t.add_column(col, justify="left" if col == "benchmark" else "right", no_wrap=col == "benchmark")
    for row in table.rows:
        t.add_row(*[c.text for c in row])
    Console(highlight=False).print(t)
    err.print("sd seeds: one run's accuracy spread from training randomness; sd samples: from the noise of k samples "
              "per problem, which more samples per problem shrink (at 2k ...: seeds needed then); —: over 10,000")
