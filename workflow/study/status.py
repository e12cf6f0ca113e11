"""`rlsweep status` for an Optuna sweep: the study's trials by state, the best one, and each trial's parameters,
value and runs, read from the study's storage (the same file optuna-dashboard opens)."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState
from rich.table import Table

from workflow.study.factory import journal_path, make_storage, study_name
from workflow.study.objective import objective_name
from workflow.study.trials import format_params


def study_report(spec, results_root: str | Path, sweep: str) -> tuple[Table | None, str]:
    """(a table of the trials, a one-line summary); no table when the study has not started."""
    name = study_name(spec, sweep)
    journal = journal_path(spec, results_root, sweep)
    if journal is not None and not journal.is_file():
        return None, f"study {name}: not started (storage {journal})"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=name, storage=make_storage(spec, results_root, sweep))
    except KeyError:
        return None, f"study {name}: not started"
    trials = study.get_trials(deepcopy=False)
    counts = {s.name.lower(): sum(t.state == s for t in trials) for s in TrialState}
    line = (f"study {name}: {counts['complete']}/{spec.n_trials} complete, {counts['running']} running, "
            f"{counts['fail']} failed, {counts['pruned']} pruned")
    best = None
    if len(spec.study_directions) == 1 and counts["complete"]:
        best = study.best_trial
        line += f"; best {best.value:.4g} (trial {best.number})"
    storage = journal if journal is not None else spec.storage
    line += f"\n  storage: {storage}  (optuna-dashboard {storage})"
    objective = objective_name(spec.objective)
    t = Table(title=f"study {name} ({', '.join(spec.study_directions)} {objective})")
    for col in ("trial", "state", "value", "params", "runs"):
        t.add_column(col)
    for tr in trials:
        value = "" if tr.values is None else ", ".join(f"{v:.4g}" for v in tr.values)
        state = tr.state.name.lower()
        style = {"complete": "green", "fail": "red", "running": "yellow", "pruned": "dim"}.get(state, "")
        params = format_params(tr.params)
        mark = " *" if best is not None and tr.number == best.number else ""
        t.add_row(f"{tr.number}{mark}", f"[{style}]{state}[/]" if style else state, value, params,
                  " ".join(tr.user_attrs.get("run_ids", [])) or tr.user_attrs.get("error", ""))
    return t, line
