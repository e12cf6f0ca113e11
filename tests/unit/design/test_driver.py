"""The design's driver up to the point where it starts a nested snakemake: a budget that cannot pay for the next
round ends the design there, its open pairs `undecided (budget)` in the DONE file, the round record and the
`decisions` table; a raised budget is another target that continues it. No training: round 1's look is recorded by
hand, as a driver that trained it would have left it."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import write_sweep
from workflow.design.driver import BUDGET, DesignDriver
from workflow.design.rounds import design_key, new_round, read_rounds, write_round
from workflow.layout import design_done
from workflow.results.decisions import damage, decision_files
from workflow.sweep.expand import load_sweep
from workflow.sweep.families import families

BODY = """
grid:
  rl.update: [grpo, sfpo]
seeds: {compare: rl.update, per_round: 2, rounds: 3, error: 0.2, gpu_hours: %s}
resources:
  rl: {time: "01:00:00"}
"""


def recorded_first_round(tmp_path: Path, budget: float) -> tuple[Path, Path]:
    sweep_file = write_sweep(tmp_path / "b.yaml", "b", BODY % budget)
    sweep, results = load_sweep(sweep_file), tmp_path / "results"
    key = design_key(sweep.spec, families(sweep.spec, sweep.runs))
    r = new_round(sweep.spec, sweep.runs, 1, [], key)
    r.values = {"rl.update=grpo": [0.1, 0.2], "rl.update=sfpo": [0.9, 0.8]}  # apart, but 2 seeds cannot decide yet
    r.decisions = {"rl.update=grpo | rl.update=sfpo": "continue"}
    write_round(results, "b", r)
    return sweep_file, results


def verdicts(results: Path) -> list[tuple[int, str]]:
    """The `decisions` files' (round, verdict), each checked as the catalog checks it (its digest included); no
    catalog query here: these results hold no stage job's table yet."""
    import pyarrow.parquet as pq
    out = []
    for path in decision_files(results, "b"):
        assert damage(path) is None
        t = pq.read_table(path)
        out += list(zip(t["round"].to_pylist(), t["verdict"].to_pylist()))
    return out


def driver(sweep_file: Path, results: Path) -> DesignDriver:
    return DesignDriver(str(sweep_file), str(results), "Snakefile", 1, [])


def test_a_budget_that_cannot_pay_for_the_next_round_ends_the_design_undecided(tmp_path):
    sweep_file, results = recorded_first_round(tmp_path, budget=0.5)  # round 2: 4 RL jobs of up to an hour each
    d = driver(sweep_file, results)
    d._train = lambda r: pytest.fail("a round over the budget must not start")  # noqa: E731
    done = d.run()
    assert done["stopped"] == "budget" and done["rounds"] == 1
    assert done["decisions"] == {"rl.update=grpo | rl.update=sfpo": BUDGET}
    assert "round 2 would cost" in done["why"] and "over the budget of 0.5" in done["why"]
    assert [r.number for r in read_rounds(results, "b")] == [1]  # round 2 never recorded, never trained
    assert verdicts(results) == [(1, BUDGET)]


def test_a_raised_budget_is_another_target_and_continues_the_design(tmp_path):
    sweep_file, results = recorded_first_round(tmp_path, budget=0.5)
    d = driver(sweep_file, results)
    d._train = lambda r: pytest.fail("over the budget")  # noqa: E731
    d.run()
    small = design_done(results, "b", d.key, 0.5)
    raised = sweep_file.with_name("b2.yaml")
    raised.write_text(sweep_file.read_text().replace("gpu_hours: 0.5", "gpu_hours: 1000"))
    d2 = driver(raised, results)
    assert d2.key == d.key and design_done(results, "b", d2.key, 1000) != small  # the same design, a new target
    trained = []

    def train(r):  # what the nested snakemake would leave: round 2's values in the tables (here: by hand)
        trained.append(r.number)
        d2._values = lambda rr: {"rl.update=grpo": [0.15, 0.1], "rl.update=sfpo": [0.85, 0.95]}
    d2._train = train
    done = d2.run()
    assert trained == [2] and done["stopped"] == "decided" and done["rounds"] == 2
    assert done["decisions"] == {"rl.update=grpo | rl.update=sfpo": "smaller"}
    assert verdicts(results) == [(1, "continue"), (2, "smaller")]


def test_watch_and_status_follow_the_rounds_the_driver_records(tmp_path):
    """`rlsweep watch` started before round 2 shows round 2's runs once the driver records it, and the design's
    line says where it stands; `status` lists every pair."""
    from workflow.design.status import design_state, line, table
    from workflow.watch.snapshot import Watcher
    from workflow.watch.view import plain
    sweep_file, results = recorded_first_round(tmp_path, budget=1000)
    sweep = load_sweep(sweep_file)
    watcher = Watcher(sweep, results, squeue=lambda: {})
    first = watcher.snapshot()
    assert len(first.lines) == 4 and "round 1 of 3 tested; 0 of 1 pair(s) decided; 4 RL run(s)" in first.design
    key = design_key(sweep.spec, families(sweep.spec, sweep.runs))
    write_round(results, "b", new_round(sweep.spec, sweep.runs, 2, ["rl.update=grpo", "rl.update=sfpo"], key))
    second = watcher.snapshot()
    assert len(second.lines) == 8 and sorted({ln.seed for ln in second.lines}) == [0, 1, 2, 3]
    assert "round 2 of 3 training (2 setting(s) x seeds 2-3)" in second.design
    assert "pairs: rl.update=grpo vs rl.update=sfpo open" not in second.design  # (named by the compared value)
    assert "pairs: grpo vs sfpo open" in second.design and all(ln in plain(second) for ln in second.design.split("\n"))
    state = design_state(sweep, results)
    assert [(p.a, p.b, p.verdict, p.seeds_a) for p in state.pairs] == [
        ("rl.update=grpo", "rl.update=sfpo", "open", 2)]
    assert table(state, sweep.spec.design).row_count == 1 and "8 RL run(s)" in line(state)
