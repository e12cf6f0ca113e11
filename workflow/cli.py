"""`rlsweep`: inspect sweeps and query results.

    rlsweep validate SWEEP.yaml          expand + validate a sweep, list its runs (nothing runs)
    rlsweep status SWEEP.yaml            each run's stage states (pending / step n/N / running / failed / done);
                                         for an Optuna sweep also its study: trials by state, best value, params
    rlsweep query "SQL" [--sweep NAME] [--format table|records|csv|json]
                                         read-only DuckDB over the views runs, train_steps, eval_samples, eval_scores
    rlsweep smoke SWEEP.yaml [--steps 2] [--dry-run] [--snakemake ARGS]
                                         the sweep's DAG shrunk to minutes on this machine (tiny model, a few
                                         steps) before it spends a GPU allocation: results/<name>-smoke
    rlsweep doctor SWEEP.yaml | --sweep NAME [--fix]
                                         damaged table files, leftover temporaries, DONE.json vs the tables, and how
                                         to recompute; --fix moves what must go to quarantine (exit 1: problems)
    rlsweep profile install [--partition P] [--account A] [--qos Q] [--name slurm]
                                         install profiles/slurm as your Snakemake profile: `snakemake --profile slurm`
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from workflow.atomic import write_text
from workflow.layout import CHECKPOINTS, DONE, done_path, latest_checkpoint, stage_dir
from workflow.results.catalog import Catalog, Damaged, QueryError
from workflow.results.display import FORMATS, print_table
from workflow.results.doctor import affected_runs, examine, quarantine, report_lines, summary_line
from workflow.smoke import smoke_sweep
from workflow.study.factory import journal_path, study_name
from workflow.study.status import study_report
from workflow.study.trials import recorded_runs
from workflow.sweep.expand import load_sweep
from workflow.sweep.spec import SweepError

_err = Console(stderr=True, highlight=False)


def _results_root(a) -> Path:
    return Path(a.results or os.environ.get("RLSWEEP_RESULTS", "results"))


# ------------------------------------------------------------------------------------------------------ query
def cmd_query(a) -> int:
    catalog = Catalog(_results_root(a), a.sweep)
    warn_damaged(catalog.damaged)
    print_table(catalog.query(a.sql), a.format)
    return 0


def warn_damaged(damaged: list[Damaged], runs: dict[Damaged, list[str]] | None = None) -> None:
    """One line on stderr per table file the query left out (plain print: a path may hold rich markup)."""
    for d in damaged:
        whose = f" ({d.owner})" if d.owner else ""
        affects = f"; affects run(s) {', '.join(runs[d])}" if runs and runs.get(d) else ""
        print(f"warning: left out unreadable {d.table} file {d.path}{whose}: {d.reason}{affects} "
              "(`rlsweep doctor` says how to recompute it)", file=sys.stderr)


# ----------------------------------------------------------------------------------------------------- status
def stage_state(out_dir: Path, total_steps: int, status_by_id: dict[str, str], stage_id: str) -> str:
    if (out_dir / DONE).is_file():
        return "[green]done[/]"
    recorded = status_by_id.get(stage_id)
    if recorded in ("failed", "interrupted"):
        return f"[red]{recorded}[/]"
    found = latest_checkpoint(out_dir / CHECKPOINTS)
    progress = f"step {found[0]}/{total_steps}" if found else None
    if recorded == "running":
        return f"[yellow]running{' ' + progress if progress else ''}[/]"
    return f"[yellow]{progress}[/]" if progress else "[dim]pending[/]"


def data_state(root: Path, sweep: str, run, status_by_id: dict[str, str]) -> str:
    """The run's data stage, and once its overlap check is done the largest benchmark overlap it found."""
    if run.data_id is None:
        return "[dim]-[/]"
    if not done_path(root, sweep, "data", run.data_id).is_file():
        recorded = status_by_id.get(run.data_id)
        return f"[red]{recorded}[/]" if recorded in ("failed", "interrupted") else f"[yellow]{recorded or 'pending'}[/]"
    check = done_path(root, sweep, "overlap", run.overlap_id) if run.overlap_id else None
    if check is None or not check.is_file():
        return "[green]done[/]"
    report = json.loads((check.parent / json.loads(check.read_text())["output"]).read_text())
    name, worst = max(((n, r["fraction"]) for n, r in report.items()), key=lambda x: x[1], default=("", 0.0))
    style = "green" if worst == 0 else "yellow"
    return f"[{style}]done[/] overlap {100 * worst:.1f}%" + (f" ({name})" if worst else "")


def cmd_status(a) -> int:
    sweep = load_sweep(a.sweep_file)
    root = _results_root(a)
    if sweep.spec.optuna is not None:  # the trials started so far are the sweep's runs
        sweep.add_runs(recorded_runs(sweep.spec, root, sweep.name))
    catalog = Catalog(root, sweep.name)
    try:
        recorded = {r["run_id"]: r["status"] for r in catalog.query("SELECT run_id, status FROM runs").to_pylist()}
        scores = {r["run_id"]: r["avg"] for r in catalog.query(
            "SELECT run_id, avg_at_k AS avg FROM eval_scores WHERE k = 1 "
            "QUALIFY step = max(step) OVER (PARTITION BY run_id)").to_pylist()}
    except QueryError:  # nothing has run yet
        recorded, scores = {}, {}
    t = Table(title=f"{sweep.name}: {len(sweep.runs)} runs, {len(sweep.sft_configs)} SFT jobs ({sweep.path})")
    with_data = bool(sweep.data_configs)
    for col in ("run_id", "method", "setting", "seed", *(["data"] if with_data else []), "sft", "rl", "eval",
                "avg@k"):
        t.add_column(col)
    n_evaluated = 0
    for r in sweep.runs:
        cfg = r.config
        data = [data_state(root, sweep.name, r, recorded)] if with_data else []
        sft = (stage_state(stage_dir(root, sweep.name, "sft", r.sft_id), cfg.sft.steps, recorded, r.sft_id)
               if r.sft_id else "[dim]off[/]")
        rl = stage_state(stage_dir(root, sweep.name, "rl", r.run_id), cfg.rl.steps, recorded, r.run_id)
        jobs = r.eval_jobs
        n_done = sum(done_path(root, sweep.name, "eval", r.eval_id, r.run_id, step, group).is_file()
                     for step, group in jobs)
        ev = ("[green]done[/]" if n_done == len(jobs) else f"[yellow]{n_done}/{len(jobs)} jobs[/]" if n_done
              else "[dim]pending[/]")
        n_evaluated += n_done == len(jobs)
        avg = scores.get(r.run_id)
        t.add_row(r.run_id, r.method, r.label, str(cfg.seed), *data, sft, rl, ev,
                  "" if avg is None else f"{avg:.3f}")
    Console(highlight=False).print(t)
    _err.print(f"[dim]{n_evaluated}/{len(sweep.runs)} runs evaluated; results under {root / sweep.name}[/]")
    warn_damaged(catalog.damaged, {d: affected_runs(d, sweep.runs) for d in catalog.damaged})
    if sweep.spec.optuna is not None:
        table, line = study_report(sweep.spec.optuna, root, sweep.name)
        if table is not None:
            Console(highlight=False).print(table)
        _err.print(line)
    return 0


# ----------------------------------------------------------------------------------------------------- doctor
def cmd_doctor(a) -> int:
    if bool(a.sweep_file) == bool(a.sweep):
        print("error: name the sweep: rlsweep doctor SWEEP.yaml, or rlsweep doctor --sweep NAME", file=sys.stderr)
        return 2
    name, root = load_sweep(a.sweep_file).name if a.sweep_file else a.sweep, _results_root(a)
    if not (root / name).is_dir():
        print(f"error: no results for sweep {name!r} under {root}", file=sys.stderr)
        return 2
    report = examine(root, name, a.sweep_file)
    moved = quarantine(report)[1] if a.fix and report.problems else None
    for line in report_lines(report, moved):
        print(line)
    print(summary_line(report, fixed=moved is not None), file=sys.stderr)
    return 1 if report.problems else 0


# --------------------------------------------------------------------------------------------------- validate
def cmd_validate(a) -> int:
    sweep = load_sweep(a.sweep_file)
    if sweep.spec.optuna is not None:
        return _validate_study(sweep)
    data = (f", {len(sweep.data_configs)} data job(s) + {len(sweep.overlap_configs)} overlap check(s)"
            if sweep.data_configs else "")
    t = Table(title=f"{sweep.name}: {len(sweep.runs)} runs, {len(sweep.sft_configs)} SFT jobs{data}")
    for col in ("run_id", *(["data_id"] if data else []), "sft_id", "eval_id", "method", "setting", "seed"):
        t.add_column(col)
    for r in sweep.runs:
        t.add_row(r.run_id, *([r.data_id] if data else []), r.sft_id or "-", r.eval_id, r.method, r.label,
                  str(r.config.seed))
    Console(highlight=False).print(t)
    return 0


def _validate_study(sweep) -> int:
    opt = sweep.spec.optuna
    t = Table(title=f"{sweep.name}: Optuna study {study_name(opt, sweep.name)}, search space (sampled in this order)")
    for col in ("key", "type", "range / choices", "when"):
        t.add_column(col)
    for key, p in opt.space.items():
        rng = (", ".join(map(str, p.choices)) if p.type == "categorical" else
               f"[{p.low}, {p.high}]" + (" log" if p.log else "") + (f" step {p.step}" if p.step else ""))
        t.add_row(key, p.type, rng, " ".join(f"{k}={v}" for k, v in p.when.items()))
    Console(highlight=False).print(t)
    storage = journal_path(opt, _results_root(argparse.Namespace(results=None)), sweep.name) or opt.storage
    objective = opt.objective if isinstance(opt.objective, str) else "sql"
    _err.print(f"{opt.n_trials} trials, {opt.in_flight} at once; {', '.join(opt.study_directions)} {objective}; "
               f"sampler {opt.sampler.name}, pruner {opt.pruner.name}; {len(sweep.spec.seeds)} run(s) per trial; "
               f"storage {storage}. Trials become runs as the study asks for them.")
    return 0


# ------------------------------------------------------------------------------------------------------ smoke
SNAKEFILE = Path(__file__).resolve().parent.parent / "Snakefile"


def cmd_smoke(a) -> int:
    load_sweep(a.sweep_file)  # the original must be valid first: its own errors, with its own name
    raw = yaml.safe_load(Path(a.sweep_file).read_text())
    smoke = smoke_sweep(raw, steps=a.steps)
    root = _results_root(a)
    path = root / f"{smoke['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, f"# rlsweep smoke {a.sweep_file} (workflow/smoke.py)\n" + yaml.safe_dump(smoke, sort_keys=False))
    sweep = load_sweep(path)
    _err.print(f"smoke sweep {path}: {len(sweep.runs)} run(s), {len(sweep.sft_configs)} SFT job(s); results under "
               f"{root / sweep.name}")
    extra = shlex.split(a.snakemake)
    argv = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--config", f"sweep={path}", f"results={root}",
            *(["-n"] if a.dry_run else []), *extra]
    return subprocess.run(argv).returncode


# ---------------------------------------------------------------------------------------------------- profile
PROFILE_SOURCE = Path(__file__).resolve().parent.parent / "profiles" / "slurm" / "config.yaml"


def profile_home() -> Path:
    """Where `snakemake --profile NAME` looks after the current directory (Snakemake uses the XDG config dir)."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "snakemake"


def cmd_profile_install(a) -> int:
    text = PROFILE_SOURCE.read_text()
    settings = {"partition": a.partition, "account": a.account, "qos": a.qos}
    filled = [f"rlsweep-slurm-{k}: {v}" for k, v in settings.items() if v]
    if filled:
        text += "# this cluster's defaults (a stage's own resources in the sweep win)\n" + "\n".join(filled) + "\n"
    target = profile_home() / a.name / "config.yaml"
    if target.exists() and target.read_text() != text and not a.force:
        _err.print(f"error: {target} exists and differs; not overwriting it (use --force to replace it)")
        return 2
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    _err.print(f"installed {target}\nrun a sweep on SLURM with: snakemake --profile {a.name} --config sweep=SWEEP.yaml")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="rlsweep", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--results", help="results directory (default: $RLSWEEP_RESULTS or ./results)")
    # --results is accepted after the subcommand too (SUPPRESS: it only overrides when given there)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--results", default=argparse.SUPPRESS, help="results directory")
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("query", parents=[common], help="run read-only SQL over the result tables")
    q.add_argument("sql")
    q.add_argument("--sweep", help="only this sweep's results")
    q.add_argument("--format", choices=FORMATS, default="table",
                   help="table (one record per block when too wide), records, csv, json")
    q.set_defaults(fn=cmd_query)
    s = sub.add_parser("status", parents=[common], help="show each run's stage states")
    s.add_argument("sweep_file")
    s.set_defaults(fn=cmd_status)
    d = sub.add_parser("doctor", parents=[common], help="find damaged or inconsistent results; say how to recompute")
    d.add_argument("sweep_file", nargs="?", help="the sweep file (or --sweep NAME)")
    d.add_argument("--sweep", help="the sweep's name, when its file is not at hand")
    d.add_argument("--fix", action="store_true", help="move what each problem lists to results/<sweep>/quarantine/")
    d.set_defaults(fn=cmd_doctor)
    v = sub.add_parser("validate", help="expand and validate a sweep file without running anything")
    v.add_argument("sweep_file")
    v.set_defaults(fn=cmd_validate)
    sm = sub.add_parser("smoke", parents=[common], help="run the sweep shrunk to minutes on this machine")
    sm.add_argument("sweep_file")
    sm.add_argument("--steps", type=int, default=2, help="RL steps per run (default 2)")
    sm.add_argument("-n", "--dry-run", action="store_true", help="plan the smoke DAG without running it")
    sm.add_argument("--snakemake", default="", metavar="ARGS", help="options for snakemake, e.g. '--cores 2'")
    sm.set_defaults(fn=cmd_smoke)
    pr = sub.add_parser("profile", help="manage the Snakemake profile for SLURM")
    prs = pr.add_subparsers(dest="action", required=True)
    pi = prs.add_parser("install", help="write profiles/slurm as a user profile with your cluster's names")
    pi.add_argument("--partition", help="default partition (a stage's `resources.<stage>.partition` wins)")
    pi.add_argument("--account", help="default account")
    pi.add_argument("--qos", help="default QOS")
    pi.add_argument("--name", default="slurm", help="profile name (default: slurm -> `snakemake --profile slurm`)")
    pi.add_argument("--force", action="store_true", help="replace an existing, different profile of that name")
    pi.set_defaults(fn=cmd_profile_install)
    a = p.parse_args(argv)
    try:
        return a.fn(a)
    except (SweepError, QueryError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
