"""The design's driver: round after round, train the seeds the undecided comparisons need, evaluate them, test, and
record the decision, until every pair is decided, K rounds are done, or the next round would overrun the budget.
It runs as the Snakemake rule `design` (rules/design.smk), so one `snakemake` command runs the whole design.

Each round is one nested `snakemake` over this Snakefile with the round's targets (its runs' evaluations), through
the outer invocation's executor and profile (SLURM included), so its runs are ordinary stage jobs of the same rules,
cached by run id. Round r trains the same seed values for every setting still in play (design_spec.seeds_of_round),
and a run's id hashes its seed's value: nothing is renumbered, and a seed an earlier sweep trained is reused.

After the round the driver reads each run's metric from the tables (the objective's SQL, workflow/study/objective.py),
looks (workflow/design/adastop.py), and records the look in the round's record (workflow/design/rounds.py) and the
`decisions` table (workflow/results/decisions.py).

Crash safety: the round is recorded before its runs start and its look after they are tested. A driver started again
replays the recorded looks into a fresh comparator (its permutations are seeded per block and pair, so the state is
the one an uninterrupted driver had), then runs the first round without a look: its finished stage jobs are cached,
an interrupted one resumes from its checkpoint, nothing is trained twice.

The budget: before each round the driver prices it with the plan's estimates (workflow/design/cost.py) and stops
when what the design's jobs spent plus that price would overrun `gpu_hours`. K stays as it was fixed; the pairs still
open are `undecided (budget)`, and the error guarantee holds (stopping without rejecting spends no error).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from workflow.atomic import write_json
from workflow.design.adastop import CONTINUE, EQUAL, Comparator
from workflow.design.cost import price, spent, unit_of
from workflow.design.explain import first_round_note, worst_case_rounds
from workflow.design.rounds import (Round, check_design, design_key, pair_name, read_rounds, round_runs, new_round,
                                    write_round)
from workflow.errors import UserError
from workflow.layout import round_log, summary_path
from workflow.results import decisions as table
from workflow.results.summary import write_summary
from workflow.study.nested import start_nested
from workflow.study.objective import ObjectiveError, objective_name, objective_sql, run_values
from workflow.study.pruning import targets
from workflow.sweep.expand import load_sweep
from workflow.sweep.families import all_pairs, compared_settings, families

_say = Console(stderr=True, highlight=False).print
BUDGET = "undecided (budget)"


class DesignDriver:
    def __init__(self, sweep_file: str, results_root: str, snakefile: str, cores: int, snakemake_args: list[str]):
        self.sweep = load_sweep(sweep_file)
        self.spec, self.design = self.sweep.spec, self.sweep.spec.design
        if self.design is None:
            raise UserError(f"{sweep_file}: seeds: is a list, not a design")
        self.sweep_file, self.results, self.snakefile = sweep_file, results_root, snakefile
        self.cores, self.snakemake_args = cores, snakemake_args
        self.families = families(self.spec, self.sweep.runs)
        self.key = design_key(self.spec, self.families)
        self.rounds = read_rounds(results_root, self.sweep.name)
        check_design(self.rounds, self.key, sweep_file)
        for r in self.rounds:
            self.sweep.add_runs(round_runs(self.spec, r))
        self.sql = objective_sql(self.design.metric)
        self.proc: subprocess.Popen | None = None

    def comparator(self) -> Comparator:
        return Comparator([s.label for s in compared_settings(self.families)], n=self.design.per_round,
                          K=self.design.rounds, alpha=self.design.error, pairs=all_pairs(self.families),
                          paths=self.design.permutations, seed=self.design.test_seed)

    # ------------------------------------------------------------------------------------------------ the loop
    def run(self) -> dict[str, Any]:
        c = self.comparator()
        looked = [r for r in self.rounds if r.looked]
        for r in looked:  # the recorded looks, replayed: the state an uninterrupted driver had
            c.look(self._values_so_far(c, looked[:r.number]))
        if looked:
            _say(f"design {self.sweep.name}: {len(looked)} round(s) recorded, replayed: " + self._state(c))
        else:
            worst = self._worst_case()
            _say(f"design {self.sweep.name}: {len(c.pairs)} pair(s) of {len(c.settings)} settings, {c.n} seed(s) per "
                 f"setting per round, at most {c.K} rounds, error {c.alpha}; the worst case costs {worst.text()}"
                 + (f" against a budget of {self.design.gpu_hours:g}" if self.design.gpu_hours is not None else ""))
            if self.design.first_deciding_round > 1:
                _say(f"[yellow]{first_round_note(self.design)[0]}[/]")
        stopped = None
        while not c.finished and c.round < c.K:
            number = c.round + 1
            r = self.rounds[number - 1] if len(self.rounds) >= number else None
            if r is None:
                r = new_round(self.spec, self.sweep.runs, number, c.in_play, self.key)
                if (why := self._over_budget(r)) is not None:
                    stopped = why
                    break
                write_round(self.results, self.sweep.name, r)  # before its runs start: the next driver's record
                self.rounds.append(r)
            else:
                if r.settings != c.in_play and number > 1:  # (replay is deterministic: only a hand-edited record)
                    raise UserError(f"round {number}: its record trains {r.settings}, but the recorded looks leave "
                                    f"{c.in_play} in play: the round records were changed by hand")
                _say(f"[yellow]round {number}: resuming the round a previous driver started[/]")
            self._train(r)
            r.values = self._values(r)
            r.extra["spent"] = spent(self.sweep, self.results, unit_of(self.sweep, self.results))
            c.look(self._values_so_far(c, self.rounds[:number]))
            r.decisions = {pair_name(p): v for p, v in c.decisions.items()}
            r.extra.pop("stopped", None)
            write_round(self.results, self.sweep.name, r)
            _say(f"round {number}/{c.K}: " + self._state(c))
        if stopped is not None and self.rounds:
            self.rounds[-1].extra["stopped"] = stopped
            write_round(self.results, self.sweep.name, self.rounds[-1])
        elif self.rounds and "stopped" in self.rounds[-1].extra:  # a raised budget that let the design finish
            self.rounds[-1].extra.pop("stopped")
            write_round(self.results, self.sweep.name, self.rounds[-1])
        self._write_decisions()
        return self._done(c, stopped)

    def _values_so_far(self, c: Comparator, rounds: list[Round]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {s: [] for s in c.settings}
        for r in rounds:
            for label, values in (r.values or {}).items():
                if label in out:
                    out[label].extend(values)
        return out

    def _train(self, r: Round) -> None:
        runs = round_runs(self.spec, r)
        self.sweep.add_runs(runs)
        ids = ", ".join(f"{label}: {' '.join(ids)}" for label, ids in r.run_ids.items())
        _say(f"round {r.number}/{self.design.rounds}: {len(r.settings)} setting(s) x seeds "
             f"{r.seeds[0]}-{r.seeds[-1]} ({len(runs)} RL runs): {ids}")
        log = round_log(self.results, self.sweep.name, r.number)
        self.proc, relay = start_nested(self.snakefile, self.cores, self.snakemake_args, self.sweep_file,
                                        self.results, targets(self.results, runs, runs[0].config.rl.steps), log)
        code = self.proc.wait()
        relay.wait()
        self.proc = None
        if code != 0:
            raise UserError(f"round {r.number}: its jobs failed (snakemake exit {code}); log: {log}. Run the same "
                            "command again to resume the round (its finished jobs are kept)")

    def _values(self, r: Round) -> dict[str, list[float]]:
        try:
            found = run_values(self.sql, self.results, self.sweep.name)
        except ObjectiveError as e:
            raise UserError(f"round {r.number}: seeds.metric: {e}") from None
        missing = [i for ids in r.run_ids.values() for i in ids if i not in found]
        if missing:
            raise UserError(f"round {r.number}: seeds.metric ({objective_name(self.design.metric)}) has no value for "
                            f"run(s) {', '.join(missing)}: the test cannot look without them")
        return {label: [found[i][0] for i in ids] for label, ids in r.run_ids.items()}

    # ------------------------------------------------------------------------------------------------ the budget
    def _worst_case(self):
        """Every round of every setting: the most the design can spend (K is fixed before the first look)."""
        rounds = worst_case_rounds(self.sweep)
        return price(self.sweep, [run for r in rounds for run in round_runs(self.spec, r)], self.results)

    def _over_budget(self, r: Round) -> str | None:
        if self.design.gpu_hours is None:
            return None
        cost = price(self.sweep, round_runs(self.spec, r), self.results)
        so_far = spent(self.sweep, self.results, cost.unit)
        if so_far + cost.hours <= self.design.gpu_hours:
            return None
        why = (f"round {r.number} would cost {cost.text()} on top of {so_far:.3g} spent: over the budget of "
               f"{self.design.gpu_hours:g}")
        _say(f"[yellow]design {self.sweep.name}: stopped before {why}; the pairs still open are {BUDGET}[/]")
        return why

    # ------------------------------------------------------------------------------------------------ records
    def _write_decisions(self) -> None:
        """The `decisions` table, one file per look, from the round records (a damaged file is written again)."""
        c = self.comparator()
        looked = [r for r in self.rounds if r.looked]
        for r in looked:
            before = set(c.open_pairs)
            c.look(self._values_so_far(c, looked[:r.number]))
            lk = c.looks[-1]
            budget = r is looked[-1] and "stopped" in r.extra
            rows = []
            so_far = self._values_so_far(c, looked[:r.number])
            for fam in self.families:
                for p in fam.pairs:
                    if p not in before:
                        continue
                    verdict = c.decisions[p]
                    if verdict == CONTINUE and budget:
                        verdict = BUDGET
                    a, b = p
                    va, vb = so_far[a], so_far[b]
                    rows.append({
                        "rounds": c.K, "family": fam.fixed, "a": a, "b": b, "verdict": verdict,
                        "decided_at": r.number if p in lk.decided else None,
                        "mean_a": sum(va) / len(va), "mean_b": sum(vb) / len(vb),
                        "difference": sum(va) / len(va) - sum(vb) / len(vb),
                        "statistic": lk.statistics.get(p), "boundary": lk.boundary, "spent": lk.spent,
                        "error": c.alpha,
                        "seeds_a": self._seeds_of(a, looked[:r.number]), "seeds_b": self._seeds_of(b, looked[:r.number]),
                        "values_a": va, "values_b": vb,
                        "run_ids_a": self._ids_of(a, looked[:r.number]), "run_ids_b": self._ids_of(b, looked[:r.number]),
                        "gpu_hours": r.extra.get("spent"),
                    })
            table.write(self.results, self.sweep.name, r.number, rows)

    @staticmethod
    def _seeds_of(label: str, rounds: list[Round]) -> list[int]:
        return [s for r in rounds if label in r.run_ids for s in r.seeds]

    @staticmethod
    def _ids_of(label: str, rounds: list[Round]) -> list[str]:
        return [i for r in rounds for i in r.run_ids.get(label, [])]

    def _state(self, c: Comparator) -> str:
        return "; ".join(f"{a} vs {b}: {v}" for (a, b), v in c.decisions.items())

    def _done(self, c: Comparator, stopped: str | None) -> dict[str, Any]:
        forced = c.looks and c.looks[-1].round == c.K and any(v == EQUAL for v in c.looks[-1].decided.values())
        why = "budget" if stopped else "rounds" if forced else "decided"
        decisions = {pair_name(p): (BUDGET if v == CONTINUE and stopped else v) for p, v in c.decisions.items()}
        _say(f"design {self.sweep.name}: {c.round} of {c.K} round(s), stopped ({why}): " +
             "; ".join(f"{k}: {v}" for k, v in decisions.items()))
        return {"design": self.key, "rounds": c.round, "K": c.K, "stopped": why, "why": stopped,
                "decisions": decisions}

    def stop(self) -> None:
        """Stop the round's nested run (its stages checkpoint and stop): the next driver resumes the round."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workflow.design.driver", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep-file", required=True)
    p.add_argument("--results", default="results")
    p.add_argument("--snakefile", required=True)
    p.add_argument("--cores", type=int, default=1, help="cores of each round's nested snakemake")
    p.add_argument("--out", type=Path, required=True, help="the DONE file to write when the design is over")
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER,
                   help="after --: options every nested snakemake gets (the outer run's profile / executor)")
    a = p.parse_args(argv)
    extra = a.snakemake_args[1:] if a.snakemake_args[:1] == ["--"] else a.snakemake_args
    try:
        driver = DesignDriver(a.sweep_file, a.results, a.snakefile, a.cores, extra)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    def stop(signum, frame):
        driver.stop()
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        done = driver.run()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    write_json(a.out, done)
    write_summary(a.results, driver.sweep.name, summary_path(a.results, driver.sweep.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
