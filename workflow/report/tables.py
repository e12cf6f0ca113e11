"""The report's tables as rows of cells, from the report queries' results (queries.sql): the same cells go into
report.md and index.html (render.py). Formatting only: every number is a query's."""

from __future__ import annotations

from dataclasses import dataclass, field

SET_COLUMNS = ("Avg math", "Avg OOD")


@dataclass
class Cell:
    text: str
    mark: str = ""  # "best" (the best value of its column) or "failed": bold in both renderings
    note: str = ""  # hover text in the HTML


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # said under the table


@dataclass
class Section:
    """A report section of its own module (graders.py, references.py, seeds): its title, an HTML id, its tables."""

    title: str
    name: str
    tables: list[Table]


def fmt(value, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def accuracy(rows: list[dict], planned_seeds: dict[str, int]) -> Table:
    """One row per setting (the starting point first, when evaluated) with the seeds it plans, one column per
    benchmark then the set averages: "mean ± std [95% interval]" over seeds, the best mean of each column in bold;
    a cell with fewer seeds than its setting plans says how many it has."""
    benchmarks = sorted({r["benchmark"] for r in rows} - set(SET_COLUMNS))
    benchmarks += [b for b in SET_COLUMNS if any(r["benchmark"] == b for r in rows)]
    settings: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        key = (not r["start"], r["label"], r["start_from"] or "", r["method"])
        settings.setdefault(key, {})[r["benchmark"]] = r
    best = {b: max((cells[b]["mean"] for key, cells in settings.items() if key[0] and b in cells), default=None)
            for b in benchmarks}
    table = Table(["setting", "method", "seeds", *benchmarks])
    starts = sum(1 for key in settings if not key[0])
    for (trained, label, start_from, method), cells in sorted(settings.items()):
        name = label if trained else ("start (step 0)" + (f", {start_from}" if starts > 1 else ""))
        row = [Cell(name), Cell(method), Cell(str(planned_seeds.get(label, 0)) if trained else "—")]
        for b in benchmarks:
            r = cells.get(b)
            if r is None:
                row.append(Cell("—", note="not evaluated"))
                continue
            text = fmt(r["mean"]) + (f" ± {fmt(r['std'])}" if trained and r["seeds"] > 1 else "")
            if r["ci_low"] is not None:
                text += f" [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]"
            wanted = planned_seeds.get(label, r["seeds"]) if trained else r["seeds"]
            if r["seeds"] < wanted:
                text += f" (n={r['seeds']} of {wanted})"
            is_best = trained and r["mean"] == best[b] and len(settings) > 1
            runs = f"{r['seeds']} seeds" if trained else "one evaluation"
            row.append(Cell(text, mark="best" if is_best else "",
                            note=f"{runs}, k={r['k']}, {r['n_problems']} problems"))
        table.rows.append(row)
    table.notes.append("avg@k of each run's final evaluation: mean ± sample std over seeds [95% interval of the mean, "
                       "Student's t, clipped to [0, 1]]; bold: the best mean of the column among the trained "
                       "settings. With 2 or 3 seeds the interval is wide: a gap inside it is not a finding. The "
                       "start row is the model they all began from, evaluated once (its runs share the evaluation) "
                       "[95% bootstrap interval over problems].")
    if any(b in SET_COLUMNS for b in benchmarks):
        table.notes.append("Avg math / Avg OOD: per run the unweighted mean over the complete set, then over seeds.")
    return table


STATUS_MARK = {"completed": "done", "failed": "FAILED", "running": "running", "paused": "between segments",
               "interrupted": "interrupted",
               "preempted": "preempted", "pruned": "pruned", "not started": "not started"}


def runs(rows: list[dict]) -> Table:
    """Every planned run: its status (a failed run with its error), steps trained of planned, steps evaluated."""
    accounted = any(r["rl_gpu_hours"] is not None or r["eval_gpu_hours"] is not None for r in rows)
    table = Table(["setting", "seed", "run", "status", "trained", "evaluated at"]
                  + (["GPU-hours RL + eval (SLURM)"] if accounted else []))
    for r in rows:
        status = STATUS_MARK.get(r["status"], r["status"])
        note = (r["error"] or "")[:300]
        evals = ", ".join(str(s) for s in r["eval_steps"] or []) or "—"
        trained = f"{r['trained_steps'] or 0}/{r['steps']}"
        mark = "failed" if r["status"] == "failed" else ""
        status += f" (from {r['from_sweep']})" if r.get("from_sweep") else ""
        table.rows.append([Cell(r["label"]), Cell(str(r["seed"])), Cell(r["run_id"]),
                           Cell(status, mark=mark, note=note), Cell(trained), Cell(evals)]
                          + ([Cell(_gpu_hours(r["rl_gpu_hours"], r["eval_gpu_hours"]))] if accounted else []))
    # the shared store (workflow/layout.py): stages another sweep computed, which this one reused as they were
    reused_sft = sorted({(r["sft_id"], r["sft_from"]) for r in rows if r.get("sft_from")})
    if reused_sft:
        table.notes.append("Reused from other sweeps, not trained again: " + ", ".join(
            f"SFT {sft_id} (from {sweep})" for sft_id, sweep in reused_sft) + ".")
    if any(r.get("from_sweep") for r in rows):
        table.notes.append("A run marked (from SWEEP) is that sweep's RL run, reused as it was.")
    if accounted:
        table.notes.append("GPU-hours as SLURM's accounting has them (sacct: each attempt's elapsed time x its "
                           "allocated GPUs, requeued attempts included): the RL job + its eval jobs.")
    return table


def _gpu_hours(rl: float | None, evals: float | None) -> str:
    if rl is None and evals is None:
        return "—"
    return f"{(rl or 0) + (evals or 0):.3g} ({'—' if rl is None else f'{rl:.3g}'} + {evals or 0:.3g})"


def missing(rows: list[dict]) -> list[str]:
    """What the report lacks, in words: runs failed, unfinished or not evaluated at their last step."""
    out = []
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        out.append(f"{len(failed)} run(s) failed: "
                   + ", ".join(f"{r['label']} seed {r['seed']} ({r['run_id']})" for r in failed)
                   + "; they have no final evaluation (their training steps and any evaluations before the "
                   "failure are in the curves and the efficiency table).")
    unfinished = [r for r in rows if r["status"] not in ("completed", "failed")]
    if unfinished:
        out.append(f"{len(unfinished)} run(s) not finished: " + ", ".join(
            f"{r['label']} seed {r['seed']} ({r['status']})" for r in unfinished) + ".")
    unevaluated = [r for r in rows if r["status"] == "completed" and r["steps"] not in (r["eval_steps"] or [])]
    if unevaluated:
        out.append(f"{len(unevaluated)} finished run(s) not evaluated at their last step yet: " + ", ".join(
            f"{r['label']} seed {r['seed']}" for r in unevaluated) + ".")
    return out


def _count(value: float) -> str:
    """A compute total, short: 60, 1.2k, 3.4e11, 0.25 (GPU-hours)."""
    if value is None:
        return "—"
    if abs(value) < 10 and value != int(value):
        return f"{value:.2g}"
    if abs(value) >= 1e6:
        return f"{value:.2g}"
    return f"{value / 1e3:.1f}k" if abs(value) >= 1e4 else f"{value:.0f}"


EFFICIENCY = (("step", "steps"), ("backward_passes", "backward passes"), ("rollouts", "rollouts"),
              ("flops", "FLOPs"), ("wall_s", "wall-clock s"), ("gpu_hours", "GPU-hours"))


def efficiency(rows: list[dict], baseline: str) -> Table:
    """Per benchmark and setting: the compute to first reach the baseline's best mean accuracy, as a ratio to the
    baseline's (the setting's own total in brackets), "not reached" where it never does; and the accuracy at the
    baseline's total backward passes and wall-clock."""
    on_gpus = any(r["gpu_hours"] is not None for r in rows)  # (on CPU: wall-clock only)
    shown = [(key, name) for key, name in EFFICIENCY if key != "gpu_hours" or on_gpus]
    table = Table(["benchmark", "setting", "target", "final", *[name for _, name in shown],
                   "avg@k at baseline's backward passes", "avg@k at baseline's wall-clock"])
    for r in rows:
        name = r["label"] + (" (baseline)" if r["baseline"] else "")
        cells = [Cell(r["benchmark"]), Cell(name), Cell(fmt(r["target"])), Cell(fmt(r["final_acc"]))]
        for key, _ in shown:
            if r[key] is None:
                cells.append(Cell("not reached"))
            else:
                ratio = r[f"{key}_ratio"]
                cells.append(Cell(f"×{ratio:.2f} ({_count(r[key])})" if ratio is not None else _count(r[key]),
                                  mark="best" if ratio is not None and ratio < 1 else ""))
        cells += [Cell(fmt(r["acc_at_backward_passes"])), Cell(fmt(r["acc_at_wall_s"]))]
        table.rows.append(cells)
    table.notes.append(f"Target: the best mean avg@k (over seeds) of `{baseline}` at any evaluated step after step 0. "
                       "Each column: what a setting spent (mean over seeds, running totals) up to the first "
                       "evaluated step whose mean reaches the target, as a ratio to what the baseline spent (the "
                       "setting's own total in brackets); bold: less than the baseline. Resolution is the "
                       "evaluation interval (eval.every). The last two columns: the setting's mean at its last "
                       "evaluation within the baseline's total backward passes / wall-clock (—: none within it).")
    return table


def default_baseline(labels_by_method: dict[str, set[str]]) -> str | None:
    """The plain GRPO setting when the sweep has exactly one."""
    grpo = labels_by_method.get("grpo", set())
    return next(iter(grpo)) if len(grpo) == 1 else None


def _differences(rows: list[dict], column: str, resamples: int) -> Table:
    """The paired query's rows as a table: per benchmark and setting, its seeds and problems, "mean [95% interval]"
    (bold when the interval excludes 0) and the p-value."""
    table = Table(["benchmark", "setting", "seeds", "problems", column, "p"])
    for r in rows:
        p = r["p_value"]
        table.rows.append([Cell(r["benchmark"]), Cell(r["label"]), Cell(str(r["n_seeds"])),
                           Cell(str(r["n_problems"])),
                           Cell(f"{r['mean_diff']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]",
                                mark="best" if r["ci_low"] > 0 or r["ci_high"] < 0 else ""),
                           Cell(f"< {1 / resamples:g}" if p == 0 else f"{p:.3f}")])
    return table


def gain(rows: list[dict], accuracy_rows: list[dict], compute: list[dict], start_of: dict[str, str | None],
         resamples: int) -> Table:
    """Per benchmark and setting, in the shape of a paper's comparison table: the start (the step-0 evaluation of
    the model RL started from), the final mean ± std over seeds, final minus start paired by seed and problem with
    its 95% bootstrap interval and p-value (did training improve the model it started from?), and the training
    FLOPs (SFT + RL, mean per run: the training_compute query)."""
    starts = {(r["start_from"], r["benchmark"]): r["mean"] for r in accuracy_rows if r["start"]}
    paired = {(r["label"], r["benchmark"]): r for r in rows}
    benchmarks = {b for _, b in paired}
    # every setting evaluated on those benchmarks: one without a start (a random init) shows its final alone
    finals = {(r["label"], r["benchmark"]): r for r in accuracy_rows
              if not r["start"] and r["benchmark"] in benchmarks}
    flops = {r["label"]: r["flops"] for r in compute}
    table = Table(["benchmark", "setting", "seeds", "start", "final ± std", "final − start [95% interval]", "p",
                   "training FLOPs"])
    for label, benchmark in sorted(set(paired) | set(finals), key=lambda k: (k[1], k[0])):
        r, final = paired.get((label, benchmark)), finals.get((label, benchmark))
        seeds = r["n_seeds"] if r is not None else final["seeds"]
        diff, p = (Cell("—", note="no step-0 evaluation"), Cell("—")) if r is None else (
            Cell(f"{r['mean_diff']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]",
                 mark="best" if r["ci_low"] > 0 or r["ci_high"] < 0 else ""),
            Cell(f"< {1 / resamples:g}" if r["p_value"] == 0 else f"{r['p_value']:.3f}"))
        table.rows.append([
            Cell(benchmark), Cell(label), Cell(str(seeds)),
            Cell(fmt(starts.get((start_of.get(label), benchmark)))),
            Cell("—" if final is None else fmt(final["mean"]) + (f" ± {fmt(final['std'])}" if final["seeds"] > 1
                                                                 else "")),
            diff, p, Cell(_count(flops.get(label)))])
    table.notes.append(f"Start: the step-0 evaluation (eval.at_start) of the model RL started from, one evaluation "
                       f"its seeds share. Final − start: per problem the accuracy over its samples at the final "
                       f"evaluation minus at step 0, paired by seed and problem; the interval and two-sided p-value "
                       f"from {resamples} bootstrap resamples of the seeds and of the problems. Bold: the interval "
                       "excludes 0; —: the setting has no step-0 evaluation (a random-init start has no checkpoint "
                       "to evaluate). Training FLOPs: SFT + RL per run that trained every step (mean over seeds; a "
                       "pretrained base's own steps not counted).")
    return table


def paired(rows: list[dict], baseline: str, resamples: int) -> Table:
    """Per benchmark and setting: the paired difference to the baseline (seeds and problems both have), its 95%
    bootstrap interval and p-value; an interval that holds 0 in bold marks nothing: it is noise."""
    table = _differences(rows, f"avg@k − {baseline} [95% interval]", resamples)
    table.notes.append(f"Paired by seed and problem at the final evaluation: per problem the accuracy over its "
                       f"samples, setting minus `{baseline}`; the interval and two-sided p-value from {resamples} "
                       "bootstrap resamples of the seeds and of the problems. Bold: the interval excludes 0. With "
                       "2 seeds a seed resample has 3 possible draws, so the interval mostly reflects which "
                       "problems were drawn; it does not replace more seeds.")
    return table
