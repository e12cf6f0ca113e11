"""The Optuna objects an `optuna:` block names: sampler (with the grid sampler's finite lists), pruner, storage,
study name."""

from __future__ import annotations

import difflib
import inspect
import math
import warnings
from pathlib import Path

import optuna
from optuna.storages.journal import JournalFileBackend, JournalStorage

from workflow.layout import default_journal
from workflow.results import journal
from workflow.sweep.study_spec import PRUNERS, SAMPLERS, OptunaSpec


class AskTellGridSampler(optuna.samplers.GridSampler):
    """GridSampler without its stop-when-done. That stop calls `study.stop()`, which raises RuntimeError outside
    `study.optimize` (optuna issues #4121, #5141), so the ask/tell loop's last `tell` would fail; the sweep stops
    after n_trials itself, and check_space keeps n_trials within the grid."""

    def after_trial(self, study, trial, state, values) -> None:
        pass


# constructor arguments the block sets itself, so `options:` may not
_OWNED = {"seed": "sampler.seed", "search_space": "optuna.space"}

JOURNAL_SUFFIXES = (".journal", ".log")


def make_sampler(spec: OptunaSpec) -> optuna.samplers.BaseSampler:
    cls = SAMPLERS[spec.sampler.name]
    options = dict(spec.sampler.options)
    if spec.sampler.name == "grid":
        return cls(grid_search_space(spec), seed=spec.sampler.seed, **options)
    return cls(seed=spec.sampler.seed, **options)


def grid_search_space(spec: OptunaSpec) -> dict[str, list]:
    """Every value of every key, for optuna's GridSampler (which needs finite lists)."""
    space: dict[str, list] = {}
    for key, p in spec.space.items():
        if p.type == "categorical":
            space[key] = list(p.choices)
        elif p.type == "int":
            space[key] = list(range(int(p.low), int(p.high) + 1, int(p.step or 1)))
        elif p.step is None:
            raise ValueError(f"optuna.space.{key}: a float needs `step:` for the grid sampler")
        else:
            n = math.floor((p.high - p.low) / p.step + 1e-9) + 1
            # 12 significant digits: 0.1 + 2 * 0.1 is 0.30000000000000004, the grid should say 0.3
            space[key] = [float(f"{p.low + i * p.step:.12g}") for i in range(n)]
    return space


def make_pruner(spec: OptunaSpec) -> optuna.pruners.BasePruner:
    return PRUNERS[spec.pruner.name](**spec.pruner.options)


def study_name(spec: OptunaSpec, sweep_name: str) -> str:
    return spec.study or sweep_name


def journal_path(spec: OptunaSpec, results_root: str | Path, sweep_name: str) -> Path | None:
    """The journal file the study lives in, or None when `storage` is a database URL."""
    if spec.storage is None:
        return default_journal(results_root, sweep_name)
    if spec.storage.endswith(JOURNAL_SUFFIXES):
        return Path(spec.storage).expanduser()  # relative paths: from the working directory, like the sweep file
    return None


def make_storage(spec: OptunaSpec, results_root: str | Path, sweep_name: str) -> optuna.storages.BaseStorage | str:
    """A journal-file storage (creating its directory), or the URL itself: optuna opens URLs on its own."""
    path = journal_path(spec, results_root, sweep_name)
    if path is None:
        return spec.storage
    journal.check(path, sweep_name)  # a torn journal is refused before Optuna replays or appends to it
    path.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(path)))


def check_options(spec: OptunaSpec) -> list[str]:
    """Sampler / pruner options that the constructor would reject, found before any trial runs."""
    return (_check_block_options("optuna.sampler.options", SAMPLERS[spec.sampler.name], spec.sampler.options,
                                 None if spec.sampler.name == "grid" else lambda: make_sampler(spec))
            + _check_block_options("optuna.pruner.options", PRUNERS[spec.pruner.name], spec.pruner.options,
                                   lambda: make_pruner(spec)))


def _check_block_options(where: str, cls: type, options: dict, make) -> list[str]:
    params = [p for p in inspect.signature(cls).parameters if p not in ("self", "args", "kwargs")]
    problems = []
    for name in options:
        if name in _OWNED and name in params:
            problems.append(f"{where}.{name}: set by {_OWNED[name]}, not by options")
        elif name not in params:
            close = difflib.get_close_matches(name, params, n=1)
            takes = [p for p in params if p not in _OWNED]
            hint = (f"; did you mean '{close[0]}'?" if close else
                    f" (it takes: {', '.join(takes)})" if takes else " (it takes no options)")
            problems.append(f"{where}.{name}: not an option of {cls.__name__}{hint}")
    if problems or make is None:  # the grid sampler's only input, its space, is checked with the space
        return problems
    # the names are right; let the constructor judge the values
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation / experimental warnings are not problems of the sweep file
        try:
            make()
        except Exception as e:  # whatever the constructor raises, the cause is an option value
            problems.append(f"{where}: {type(e).__name__}: {e}")
    return problems


def open_storage(location: str) -> optuna.storages.BaseStorage | str:
    if "://" in location:
        return location
    journal.check(location)
    return JournalStorage(JournalFileBackend(location))
