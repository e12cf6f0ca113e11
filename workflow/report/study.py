"""The report's Optuna section (a sweep with an `optuna:` block): its best trials, the objective's history and the
parameters' importances, from the study's own storage through Optuna's API and its matplotlib visualisations
(not recomputed here)."""

from __future__ import annotations

import warnings
from pathlib import Path

import optuna
from optuna.trial import TrialState

from workflow.report.figures import Figure, save
from workflow.report.tables import Cell, Table
from workflow.study.factory import journal_path, make_storage, study_name
from workflow.study.objective import objective_name
from workflow.study.trials import format_params

BEST = 5  # trials listed


def study_section(spec, results_root: str | Path, sweep: str, out_dir: Path) -> tuple[Table | None, list[Figure],
                                                                                     list[str]]:
    """(the best trials, the figures, notes); no table when the study has not started or has no complete trial."""
    name = study_name(spec, sweep)
    journal = journal_path(spec, results_root, sweep)
    if journal is not None and not journal.is_file():
        return None, [], [f"Optuna study {name}: not started."]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=name, storage=make_storage(spec, results_root, sweep))
    except KeyError:
        return None, [], [f"Optuna study {name}: not started."]
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    counts = {s.name.lower(): sum(t.state == s for t in trials) for s in TrialState}
    notes = [f"Optuna study `{name}` ({', '.join(spec.study_directions)} {objective_name(spec.objective)}): "
             f"{counts['complete']} of {spec.n_trials} trials complete, {counts['running']} running, "
             f"{counts['fail']} failed, {counts['pruned']} pruned."]
    if not complete or len(spec.study_directions) > 1:  # (a multi-objective study has a front, not a best)
        return None, [], notes
    maximize = spec.study_directions[0] == "maximize"
    ranked = sorted(complete, key=lambda t: t.value, reverse=maximize)[:BEST]
    table = Table(["trial", "value", "params", "runs"])
    for i, t in enumerate(ranked):
        table.rows.append([Cell(str(t.number), mark="best" if i == 0 else ""), Cell(f"{t.value:.4g}"),
                           Cell(format_params(t.params)), Cell(" ".join(t.user_attrs.get("run_ids", [])))])
    figures = []
    with warnings.catch_warnings():  # Optuna marks its matplotlib plots experimental
        warnings.simplefilter("ignore")
        ax = optuna.visualization.matplotlib.plot_optimization_history(study)
        figures.append(save(ax.figure, out_dir, "optuna_history", "Optuna: the objective of each trial and the "
                            "best so far (Optuna's plot_optimization_history)"))
        if len(complete) >= 2 and len({k for t in complete for k in t.params}) >= 1:
            try:
                ax = optuna.visualization.matplotlib.plot_param_importances(study)
                figures.append(save(ax.figure, out_dir, "optuna_importances", "Optuna: parameter importances "
                                    "(Optuna's default evaluator, fANOVA)"))
            except (RuntimeError, ValueError) as e:  # e.g. every complete trial has the same parameters
                notes.append(f"No parameter importances: {e}")
    return table, figures, notes
