"""The study driver: ask -> train/eval -> objective -> tell, keeping `in_flight` trials running until the study has
`n_trials` finished trials. It runs as the Snakemake rule `study` (rules/study.smk), so one `snakemake` command
drives the whole study.

Why a driver and not one static DAG: Snakemake fixes a DAG's jobs when it plans it (checkpoints re-plan, but a
checkpoint rule can only wait for fixed upstream jobs, so trial i would have to wait for one fixed earlier trial,
not for whichever finishes first). Instead every trial is its own nested `snakemake` over the same Snakefile and
the trial's targets, started the moment a slot frees: no lock-step batches. The nested runs use the outer
invocation's executor and profile (SLURM included), so trials are ordinary jobs of the same rules, cached by run
id, with the same tables. With a pruner, a trial's nested runs go one stop at a time (pruning.py): each takes its
runs to the next evaluated step, then the driver reports the objective and asks the pruner before it submits the
next segment.

Crash safety and resume. A trial is asked (RUNNING in the Optuna storage), its parameters recorded under
results/<sweep>/study/trials/, then its runs start. Re-running the same command after the driver died resumes the
trials a dead driver left RUNNING with their recorded parameters first: their finished stages are cached, an
interrupted stage resumes from its checkpoint, nothing is asked twice. A trial whose nested run fails (a stage
failed, or its SLURM job vanished: the executor reports it failed) is told FAIL with the log path and never
retried; the study asks a new trial instead. Twin stage jobs (two trials needing the same SFT job at once) wait for
each other through the stage lock (the Snakefile's jobs run with --wait-for-twin).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState
from rich.console import Console

from workflow.atomic import write_json
from workflow.errors import UserError
from workflow.layout import runs_file, stage_dir, summary_path, trial_log
from workflow.results.summary import write_summary
from workflow.results.rows import rows_written_as
from workflow.results.writer import write_rows
from workflow.study import pruning
from workflow.study.nested import start_nested
from workflow.study.factory import make_pruner, make_sampler, make_storage, study_name
from workflow.study.objective import ObjectiveError, objective_sql, trial_values
from workflow.study.space import suggest
from workflow.study.trials import TrialError, format_params, record_trial, trial_runs
from workflow.sweep.expand import load_sweep

_say = Console(stderr=True, highlight=False).print
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


@dataclass
class Running:
    """A trial in flight: its nested `snakemake` now, and with a pruner the stops still ahead (pruning.stops)."""

    trial: optuna.Trial
    runs: list  # the trial's Runs (its seeds)
    proc: subprocess.Popen
    log: Path
    stop: int  # the step this nested run takes the trial's runs to (the last: rl.steps, every evaluation)
    ahead: list[int]  # the stops after it

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.runs]

    @property
    def number(self) -> int:
        return self.trial.number


def open_study(spec, results_root: str | Path, sweep: str) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # our lines say what happens, per trial
    storage = make_storage(spec, results_root, sweep)
    name = study_name(spec, sweep)
    # A seeded sampler restarts its random stream with each driver: after a resume it would propose the same
    # parameters as the study's first trials again (TPE's random start-up trials). Offsetting the seed by the
    # trials already stored keeps an uninterrupted study reproducible and a resumed one from replaying itself.
    try:
        done = len(optuna.load_study(study_name=name, storage=storage).trials)
    except KeyError:  # a new study
        done = 0
    seed = spec.sampler.seed + done if spec.sampler.seed is not None and spec.sampler.name != "grid" else None
    sampler = make_sampler(spec.model_copy(update={"sampler": spec.sampler.model_copy(update={"seed": seed})})
                           if seed is not None else spec)
    return optuna.create_study(study_name=name, storage=storage, sampler=sampler, pruner=make_pruner(spec),
                               directions=spec.study_directions, load_if_exists=True)


class Driver:
    def __init__(self, sweep_file: str, results_root: str, snakefile: str, cores: int, snakemake_args: list[str],
                 poll_s: float = 1.0):
        self.sweep = load_sweep(sweep_file)
        self.spec = self.sweep.spec.optuna
        if self.spec is None:
            raise ValueError(f"{sweep_file}: no optuna block")
        self.sweep_file, self.results, self.snakefile = sweep_file, results_root, snakefile
        self.cores, self.snakemake_args, self.poll_s = cores, snakemake_args, poll_s
        self.study = open_study(self.spec, results_root, self.sweep.name)
        self.sql = objective_sql(self.spec.objective)
        self.running: dict[int, Running] = {}
        self.relays: dict[int, subprocess.Popen] = {}  # per running trial: what writes its nested snakemake's log

    # ------------------------------------------------------------------------------------------------ the loop
    def run(self) -> dict[str, Any]:
        resumed = [t for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
        if resumed:
            _say(f"[yellow]study {self.study.study_name}: resuming {len(resumed)} trial(s) a previous driver left "
                 f"running: {', '.join(str(t.number) for t in resumed)}[/]")
        while True:
            while (len(self.running) < self.spec.in_flight
                   and self._finished() + len(self.running) < self.spec.n_trials):
                if resumed:
                    frozen = resumed.pop(0)
                    # a live handle on the stored trial (optuna has no public lookup by number for this)
                    self._start(optuna.Trial(self.study, frozen._trial_id), dict(frozen.params))
                else:
                    self._ask()
            if not self.running:
                break
            time.sleep(self.poll_s)
            for number, r in list(self.running.items()):
                if r.proc.poll() is not None:
                    del self.running[number]
                    self._tell(r)  # (or, at a stop before the last, the trial's next segment: in flight again)
        return self._done()

    def _finished(self) -> int:
        return len(self.study.get_trials(deepcopy=False, states=FINISHED))

    def _ask(self) -> None:
        trial = self.study.ask()
        params = suggest(trial, self.spec, self.sweep.spec.base)
        self._start(trial, params)

    def _start(self, trial: optuna.Trial, params: dict[str, Any]) -> None:
        number = trial.number
        try:
            runs = trial_runs(self.sweep.spec, params)
        except TrialError as e:  # a combination the run schema rejects: fail the trial, ask another
            self._fail(trial, f"invalid run config: {e}")
            return
        run_ids = [r.run_id for r in runs]
        trial.set_user_attr("run_ids", run_ids)
        record_trial(self.results, self.sweep.name, number, params)  # before the nested run reads the records
        walk = [runs[0].config.rl.steps]
        if self.spec.pruner.name != "none":
            if any(pruning.marker(self._rl_dir(run_id)).is_file() for run_id in run_ids):
                self._pruned(trial, "its run was pruned in an earlier trial with the same parameters")
                return
            walk = pruning.stops(runs[0])  # (its seeds share the config, so the segments and evaluated steps)
        self._submit(Running(trial, runs, None, trial_log(self.results, self.sweep.name, number), walk[0], walk[1:]))
        _say(f"trial {number} started ({len(self.running)} in flight): {format_params(params)} -> run(s) "
             f"{', '.join(run_ids)}" + (f"; it reports at step(s) {', '.join(map(str, walk[:-1]))}"
                                        if len(walk) > 1 else ""))

    def _submit(self, r: Running) -> None:
        """The nested `snakemake` that takes the trial's runs to `r.stop` (segments and their evaluations)."""
        r.proc, self.relays[r.number] = start_nested(
            self.snakefile, self.cores, self.snakemake_args, self.sweep_file, self.results,
            pruning.targets(self.results, r.runs, r.stop), r.log)
        self.running[r.number] = r

    def _reached(self, r: Running) -> None:
        """The trial's runs reached an intermediate stop: report the objective (the mean over its seeds, each at its
        evaluation of this step) and let the pruner decide before the next segment is submitted."""
        try:
            value = trial_values(self.sql, self.results, self.sweep.name, r.run_ids)[0]
        except ObjectiveError:  # nothing to report at this step (the objective reads something not there yet)
            value = None
        if value is not None:
            r.trial.report(value, r.stop)
            if r.trial.should_prune():
                pruning.mark_pruned(self.results, {i: self._rl_dir(i) for i in r.run_ids}, r.stop, value, r.number)
                self._pruned(r.trial, f"stopped at step {r.stop} (intermediate objective {value:.4g}); its later "
                                      "segments never run")
                self._annotate(r, "pruned", None)
                return
        r.stop, r.ahead = r.ahead[0], r.ahead[1:]
        self._submit(r)

    def _tell(self, r: Running) -> None:
        relay = self.relays.pop(r.number, None)
        if relay is not None:  # (the log complete before anyone is pointed at it)
            try:
                relay.wait(timeout=30)
            except subprocess.TimeoutExpired:
                relay.kill()
        if r.proc.returncode == 0 and r.ahead:
            self._reached(r)
            return
        if r.proc.returncode != 0:
            self._fail(r.trial, f"its jobs failed (snakemake exit {r.proc.returncode}); log: {r.log}")
            self._annotate(r, "fail", None)
            return
        try:
            values = trial_values(self.sql, self.results, self.sweep.name, r.run_ids,
                                  len(self.spec.study_directions))
        except ObjectiveError as e:
            self._fail(r.trial, str(e))
            self._annotate(r, "fail", None)
            return
        self.study.tell(r.number, values)
        self._annotate(r, "complete", values)
        best = self._best()
        _say(f"[green]trial {r.number} finished: {', '.join(f'{v:.4g}' for v in values)}[/]"
             + (f" (best {best[1]:.4g}, trial {best[0]})" if best else ""))

    def _rl_dir(self, run_id: str) -> Path:
        return stage_dir(self.results, "rl", run_id)

    def _annotate(self, r: Running, state: str, values: list[float] | None) -> None:
        """The trial's number, state and objective value on its runs' rows in `runs` (RL stage rows), so SQL over
        `runs` sees trials with their parameters (the flattened hyperparameter columns) and values: `objective`
        (the first value) and, for a multi-objective study, `objectives` (all of them, JSON)."""
        for run_id in r.run_ids:
            stem = runs_file("rl", run_id)
            found = rows_written_as(self.results, "runs", stem)  # file or pack
            if found is not None:
                rows = found.to_pylist()
                if any(row.get("trial") is not None and row.get("trial_state") == "complete" for row in rows):
                    continue  # a cached run serving a repeated proposal keeps the trial that trained it
                write_rows(self.results, "runs", stem,
                           [{**row, "study": self.study.study_name, "trial": r.number, "trial_state": state,
                             "objective": values[0] if values else None,
                             **({"objectives": json.dumps(values)} if values and len(values) > 1 else {})}
                            for row in rows])

    def _pruned(self, trial: optuna.Trial, why: str) -> None:
        self.study.tell(trial, state=TrialState.PRUNED)  # its value: the last intermediate value it reported
        _say(f"[dim]trial {trial.number} pruned: {why}[/]")

    def _fail(self, trial: optuna.Trial, why: str) -> None:
        trial.set_user_attr("error", why)
        self.study.tell(trial, state=TrialState.FAIL)
        _say(f"[red]trial {trial.number} failed: {why}[/]")

    def _best(self) -> tuple[int, float] | None:
        if len(self.spec.study_directions) > 1:
            return None
        try:
            return self.study.best_trial.number, self.study.best_value
        except ValueError:  # no completed trial yet
            return None

    def _done(self) -> dict[str, Any]:
        trials = self.study.get_trials(deepcopy=False)
        states = {s.name.lower(): sum(t.state == s for t in trials) for s in TrialState}
        best = self._best()
        done = {"study": self.study.study_name, "n_trials": self.spec.n_trials, "states": states,
                "best_trial": best[0] if best else None, "best_value": best[1] if best else None}
        _say(f"study {self.study.study_name}: {states['complete']} complete, {states['fail']} failed, "
             f"{states['pruned']} pruned" + (f"; best {best[1]:.4g} (trial {best[0]})" if best else ""))
        return done

    def stop(self) -> None:
        """Stop the nested runs (their stages checkpoint and stop): the next driver resumes these trials."""
        for r in self.running.values():
            if r.proc.poll() is None:
                r.proc.terminate()
        for r in self.running.values():
            try:
                r.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                r.proc.kill()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workflow.study.driver", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep-file", required=True)
    p.add_argument("--results", default="results")
    p.add_argument("--snakefile", required=True)
    p.add_argument("--cores", type=int, default=1, help="cores of each trial's nested snakemake")
    p.add_argument("--out", type=Path, required=True, help="the DONE file to write when the study is complete")
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER,
                   help="after --: options every nested snakemake gets (the outer run's profile / executor)")
    a = p.parse_args(argv)
    extra = a.snakemake_args[1:] if a.snakemake_args[:1] == ["--"] else a.snakemake_args
    try:
        driver = Driver(a.sweep_file, a.results, a.snakefile, a.cores, extra)
    except UserError as e:  # e.g. a damaged journal: one line saying how to recover, not a traceback
        print(f"error: {e}", file=sys.stderr)
        return 2

    def stop(signum, frame):
        driver.stop()
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    done = driver.run()
    write_json(a.out, done)
    write_summary(a.results, driver.sweep.name, summary_path(a.results, driver.sweep.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
