"""Seeds on demand through Snakemake, end to end on the tiny settings: the design's driver runs its rounds as nested
snakemakes, tests after each, records its looks in the round records and the `decisions` table; killed in the
middle of a round, the same command finishes the design with the decisions of an uninterrupted run and trains no
seed twice.

The metric is SQL over `runs` that puts SFPO one unit above GRPO whatever the tiny models learn (they solve
nothing: avg@k is 0 everywhere), so the decision is known: with 2 seeds a round at error 0.2 the first round cannot
decide (C(4, 2) = 6 splits: 2/6 > 0.2/3) and the second can, before the last of 3."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from helpers import REPO, cli, write_sweep
from workflow.design.adastop import replay
from workflow.design.rounds import read_rounds
from workflow.layout import design_dir, round_record, stage_dir, store_dir
from workflow.results.catalog import query

pytestmark = pytest.mark.slow  # Snakemake, nested

METRIC = ("SELECT run_id, CASE WHEN method = 'sfpo' THEN 1.0 ELSE 0.0 END + seed / 1000.0 AS value "
          "FROM runs WHERE stage = 'rl'")
DESIGN = {"compare": "rl.update", "metric": {"sql": METRIC}, "per_round": 2, "rounds": 3, "error": 0.2}


def design_sweep(tmp_path: Path, name: str = "design") -> Path:
    body = yaml.safe_dump({"grid": {"rl.update": ["grpo", "sfpo"]}, "seeds": DESIGN}, sort_keys=False)
    return write_sweep(tmp_path / f"{name}.yaml", name, body)


def snakemake_argv(sweep: Path) -> list[str]:
    return [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores", "2",
            "--config", f"sweep={sweep}"]


def test_a_design_killed_mid_round_finishes_with_the_same_decisions_training_no_seed_twice(tmp_path):
    sweep, results = design_sweep(tmp_path), tmp_path / "results"
    proc = subprocess.Popen(snakemake_argv(sweep), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    second = round_record(results, "design", 2)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # kill once round 2's RL jobs are under way
        if second.is_file():
            ids = [i for ids in json.loads(second.read_text())["run_ids"].values() for i in ids]
            if any(stage_dir(results, "rl", i).is_dir() for i in ids):
                break
        if proc.poll() is not None:
            pytest.fail("the design ended before its second round: " + proc.stdout.read()[-3000:])
        time.sleep(0.3)
    else:
        pytest.fail("round 2 never started")
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: snakemake, the driver, the round's snakemake and its jobs
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    rounds = read_rounds(results, "design")
    assert [r.looked for r in rounds] == [True, False], out[-2000:]  # killed before round 2's look
    assert set(rounds[0].decisions.values()) == {"continue"}  # the first round cannot decide (the floor on n)
    finished = {p.name: (p / "DONE.json").stat().st_mtime_ns for p in (store_dir(results) / "rl").iterdir()
                if (p / "DONE.json").is_file()}

    res = subprocess.run(snakemake_argv(sweep), cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "replayed" in res.stderr and "resuming the round a previous driver started" in res.stderr
    done = json.loads(next(design_dir(results, "design").glob("DONE_*.json")).read_text())
    assert done["decisions"] == {"rl.update=grpo | rl.update=sfpo": "smaller"}  # GRPO below SFPO
    assert (done["rounds"], done["stopped"]) == (2, "decided")  # before the last of 3 rounds

    rounds = read_rounds(results, "design")
    assert [r.seeds for r in rounds] == [[0, 1], [2, 3]]  # the same seed values for every setting, by round
    # the decisions of an uninterrupted run: a fresh comparator over the recorded values
    again = replay([r.values for r in rounds], settings=["rl.update=grpo", "rl.update=sfpo"], n=2, K=3, alpha=0.2)
    assert {f"{a} | {b}": v for (a, b), v in again.decisions.items()} == done["decisions"]

    for run_id, mtime in finished.items():  # RL runs finished before the kill were not trained again
        assert (stage_dir(results, "rl", run_id) / "DONE.json").stat().st_mtime_ns == mtime
    steps = query("SELECT run_id, list(step ORDER BY step) AS steps FROM train_steps WHERE stage = 'rl' "
                  "GROUP BY run_id", results, "design").to_pylist()
    assert len(steps) == 8 and all(r["steps"] == [1, 2, 3, 4] for r in steps), steps  # every step exactly once

    table = query("SELECT round, verdict, decided_at, seeds_a, seeds_b FROM decisions ORDER BY round", results,
                  "design").to_pylist()
    assert table == [{"round": 1, "verdict": "continue", "decided_at": None, "seeds_a": [0, 1], "seeds_b": [0, 1]},
                     {"round": 2, "verdict": "smaller", "decided_at": 2, "seeds_a": [0, 1, 2, 3],
                      "seeds_b": [0, 1, 2, 3]}]
    status = cli("--results", str(results), "status", str(sweep))
    assert "round 2 of 3 tested; done; 1 of 1 pair(s) decided; 8 RL run(s)" in status.stderr, status.stderr
    report = (results / "design" / "report" / "report.md").read_text()
    assert "## Comparisons" in report and "| grpo vs sfpo | **smaller** |" in report

    again = subprocess.run(snakemake_argv(sweep), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def test_a_changed_design_is_refused_naming_what_fixed_the_boundaries(tmp_path):
    """The test's boundaries were fixed by its first look: a driver meeting rounds of another design stops."""
    from workflow.design.rounds import DesignChanged, Round, check_design, write_round
    results = tmp_path / "results"
    write_round(results, "design", Round(1, [0, 1], ["a"], {"a": {}}, {"a": ["x"]}, design="0123456789ab"))
    with pytest.raises(DesignChanged, match="changed since round 1 was recorded.*another name"):
        check_design(read_rounds(results, "design"), "ba9876543210", "sweep.yaml")
