"""`rlsweep report`: a sweep's report in results/<sweep>/report/ (workflow/layout.py): index.html, report.md,
queries.sql (the queries every number comes from, as they ran) and figures/ (PNG and SVG).

    queries.py  the numbers (DuckDB over the four tables)  ->  tables.py / figures.py  ->  render.py (md, HTML)
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from workflow.atomic import write_text
from workflow.engine_api.registry import traits
from workflow.layout import report_dir
from workflow.report import comparisons, cost, figures, graders, latex, references, seeds, tables
from workflow.report.queries import BOOTSTRAP, PlannedRun, fill, run_all
from workflow.report.render import render
from workflow.results.catalog import Catalog
from workflow.sweep.plan import cost_rows


def planned_runs(sweep) -> list[PlannedRun]:
    """The sweep's runs (an Optuna study's: the trials it has started) as the queries' `planned` table."""
    return [PlannedRun(r.run_id, r.eval_id, r.label, r.method, r.config.seed, r.config.rl.steps, gpus(r.config),
                       r.start_name) for r in sweep.runs]


def gpus(cfg) -> int:
    """The GPUs an RL job trains on: verl's (n_gpus_per_node x nnodes) on GPUs, none for the local engine or a
    verl run on CPU."""
    return traits(cfg.engine.name).gpus(cfg.engine)


def _gaps(data: dict[str, list[dict]], baseline: str | None, study: bool) -> list[str]:
    """Why a section is missing, in words (under the curves)."""
    notes = []
    if data["eval_curves"] and all(len(r["eval_steps"] or []) < 2 for r in data["runs"]):
        notes.append("Accuracy curves need evaluations at several steps: set `eval.every` (and `eval.at_start`) in "
                     "the sweep.")
    if baseline is None and not study:
        notes.append("No efficiency table: the sweep has no single plain GRPO setting; name the baseline with "
                     "`report: {baseline: SETTING}`.")
    elif baseline is not None and not data["efficiency"]:
        notes.append(f"No efficiency table: `{baseline}` has no evaluation after step 0 with its training steps "
                     "recorded.")
    return notes


def references_section(specs, accuracy: list[dict]) -> tables.Section | None:
    """The published results the sweep names (report.references) beside its measured means: each file checked
    whole (an average over another benchmark set is flagged even when the rows shown are filtered)."""
    if not specs:
        return None
    measured: dict[str, dict[str, float]] = {}
    for r in accuracy:
        if not r["benchmark"].startswith("Avg "):
            measured.setdefault("start (step 0)" if r["start"] else r["label"], {})[r["benchmark"]] = r["mean"]
    shown = []
    for spec in specs:
        rows = references.load(spec.file, spec.papers, spec.models)
        flags = references.check(references.load(spec.file))
        shown.append(references.table(rows, measured if not shown else None, flags))
    return tables.Section("Published references", "references", shown)


def _write_tables(directory: Path, context: dict) -> None:
    """Every table of the report as LaTeX and CSV (latex.py), named as the report's sections are; those an earlier
    report wrote and this one does not are removed."""
    named = {name: context[name] for name in ("accuracy", "runs", "efficiency", "gain", "paired", "study")
             if isinstance(context.get(name), tables.Table)}
    for section in context["sections"]:
        for i, t in enumerate(section.tables):
            named[section.name if len(section.tables) == 1 else f"{section.name}_{i + 1}"] = t
    for name, t in named.items():
        write_text(directory / f"{name}.tex", latex.latex_table(t))
        write_text(directory / f"{name}.csv", latex.csv_table(t))
    for stale in directory.glob("*.*"):
        if stale.stem not in named:
            stale.unlink()


def write_report(sweep, results_root: str | Path) -> Path:
    """Write the report of `sweep` (workflow.sweep.expand.Sweep) from its tables under results_root; returns the
    path of index.html. Raises QueryError when the sweep has no results at all."""
    out = report_dir(results_root, sweep.name)
    planned = planned_runs(sweep)
    by_method: dict[str, set[str]] = {}
    for r in planned:
        by_method.setdefault(r.method, set()).add(r.label)
    baseline = sweep.spec.report.baseline or tables.default_baseline(by_method)
    sql = fill(planned, baseline)
    catalog = Catalog(results_root, sweep.name, planned=sweep.members())
    data = {name: table.to_pylist() for name, table in run_all(catalog, sql).items()}
    seeds_of: dict[str, int] = {}  # per setting, the seeds it plans
    for r in planned:
        seeds_of[r.label] = seeds_of.get(r.label, 0) + 1
    figs = [f for f in [figures.train_curves(data["train_curves"], out / "figures"),
                        figures.method_curves(data["method_curves"], out / "figures"),
                        *figures.eval_curves(data["eval_curves"], out / "figures")] if f is not None]
    curve_notes = _gaps(data, baseline, study=sweep.spec.optuna is not None)
    study_table, study_notes = None, []
    if sweep.spec.optuna is not None:  # (Optuna is imported only for a sweep with a study)
        from workflow.report.study import study_section
        study_table, study_figures, study_notes = study_section(sweep.spec.optuna, results_root, sweep.name,
                                                                out / "figures")
        figs += study_figures
    missing = tables.missing(data["runs"])
    missing += [f"Left out, unreadable: {d.table}/{d.path.name} (`rlsweep doctor` says how to recompute it)."
                for d in catalog.damaged]
    missing += [f"Left out, no stage job's file: {d.table}/{d.path.name} (`rlsweep doctor --fix` moves it aside)."
                for d in catalog.foreign]
    sections = [s for s in [comparisons.section(sweep, results_root), references_section(sweep.spec.report.references, data["accuracy"]),
                            graders.section(data["graders"], data["grader_disagreement"], data["grader_examples"],
                                            baseline),
                            seeds.section(data["seed_variance"], data["paired"], max(seeds_of.values(), default=0)),
                            cost.section(*cost_rows(sweep, Path(results_root), catalog))]
                if s is not None]
    gain = [r for r in data["paired"] if r["versus"] == "start"]
    versus_baseline = [r for r in data["paired"] if r["versus"] == "baseline"]
    # the results directory by its name (the report lies inside it): no machine path in what results/ holds
    context = {"sweep": sweep.name, "description": sweep.spec.description, "results": Path(results_root).resolve().name,
               "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "accuracy": tables.accuracy(data["accuracy"], seeds_of), "runs": tables.runs(data["runs"]),
               "efficiency": tables.efficiency(data["efficiency"], baseline) if data["efficiency"] else None,
               "gain": (tables.gain(gain, data["accuracy"], data["training_compute"],
                                    {r.label: r.start_from for r in planned}, BOOTSTRAP) if gain else None),
               "paired": tables.paired(versus_baseline, baseline, BOOTSTRAP) if versus_baseline else None,
               "baseline": baseline, "figures": figs, "study": study_table, "study_notes": study_notes,
               "curve_notes": curve_notes, "missing": missing, "sections": sections}
    markdown, html = render(context)
    for stale in (out / "figures").glob("*.*"):  # figures an earlier report drew and this one does not
        if stale.stem not in {f.name for f in figs}:
            stale.unlink()
    write_text(out / "queries.sql", sql)
    _write_tables(out / "exports", context)  # ("tables" would read as a table folder of the store)
    write_text(out / "report.md", markdown)
    return write_text(out / "index.html", html)
