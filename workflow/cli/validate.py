"""`rlsweep validate`: expand a sweep, list its runs (or its Optuna search space); nothing runs."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from workflow.cli.common import err, results_root
from workflow.sweep.expand import load_sweep


def cmd_validate(a) -> int:
    sweep = load_sweep(a.sweep_file)
    if sweep.spec.optuna is not None:
        return _validate_study(sweep)
    data = (f", {len(sweep.jobs('data'))} data job(s) + {len(sweep.jobs('overlap'))} overlap check(s)"
            if sweep.jobs("data") else "")
    first = " (a design's round 1)" if sweep.spec.design is not None else ""
    t = Table(title=f"{sweep.name}: {len(sweep.runs)} runs{first}, {len(sweep.jobs('sft'))} SFT jobs{data}")
    for col in ("run_id", *(["data_id"] if data else []), "sft_id", "eval_id", "method", "setting", "seed"):
        t.add_column(col)
    for r in sweep.runs:
        t.add_row(r.run_id, *([r.data_id] if data else []), r.sft_id or "-", r.eval_id, r.method, r.label,
                  str(r.config.seed))
    Console(highlight=False).print(t)
    _trackers(sweep)
    if sweep.spec.design is not None:
        _explain_design(sweep, results_root(a))
    return 0


def _trackers(sweep) -> None:
    """Where each tracker will send and which source said so (the sweep file, a variable, our default); never a
    credential (a URI holding one is not used)."""
    import os

    from workflow.tracking.destinations import describe, resolve
    for name, block in sweep.spec.tracking.model_dump(mode="json").items():
        if block is not None:
            err.print(describe(name, resolve(name, block, sweep.name, os.environ, err.print), sweep.name),
                      markup=False)


def _explain_design(sweep, root) -> None:
    """Seeds on demand: the design in one screen (the table above is its first round), priced from the store under
    `root` where the sweep runs (its executor's record there)."""
    from workflow.design.explain import lines  # (prices with the plan's estimates: DuckDB, for a design only)
    for line, warning in lines(sweep, root):
        err.print(f"[yellow]{line}[/]" if warning else line)


def _validate_study(sweep) -> int:
    from workflow.study.factory import journal_path, study_name  # Optuna: only for a sweep that has a study
    from workflow.study.objective import objective_name
    opt = sweep.spec.optuna
    t = Table(title=f"{sweep.name}: Optuna study {study_name(opt, sweep.name)}, search space (sampled in this order)")
    for col in ("key", "type", "range / choices", "when"):
        t.add_column(col)
    for key, p in opt.space.items():
        rng = (", ".join(map(str, p.choices)) if p.type == "categorical" else
               f"[{p.low}, {p.high}]" + (" log" if p.log else "") + (f" step {p.step}" if p.step else ""))
        t.add_row(key, p.type, rng, " ".join(f"{k}={v}" for k, v in p.when.items()))
    Console(highlight=False).print(t)
    storage = journal_path(opt, results_root(argparse.Namespace(results=None)), sweep.name) or opt.storage
    objective = objective_name(opt.objective)
    err.print(f"{opt.n_trials} trials, {opt.in_flight} at once; {', '.join(opt.study_directions)} {objective}; "
               f"sampler {opt.sampler.name}, pruner {opt.pruner.name}; {len(sweep.spec.seeds)} run(s) per trial; "
               f"storage {storage}. Trials become runs as the study asks for them.")
    return 0
