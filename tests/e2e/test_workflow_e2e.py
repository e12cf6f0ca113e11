"""End to end through Snakemake: a tiny sweep runs, re-running does nothing, one changed hyperparameter re-runs
only what it changes, and a bad sweep stops before any job starts. (Evaluations every N steps, and other graders
judging their stored responses without generating: tests/e2e/test_segments.py, on its sweep of segments.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import cli, mtimes, planned_jobs, snakemake, write_sweep

pytestmark = pytest.mark.slow  # not in the fast tier: whole sweeps through Snakemake

GRID = """
grid:
  rl.lr: [1.0e-4, 2.0e-4]
"""  # one seed: several seeds of a setting run in test_store.py, the step-0 test below and the studies


def planned(sweep: Path, results: Path) -> dict[str, dict[str, int]]:
    """`rlsweep plan`'s jobs by stage and state (states with no job left out)."""
    from workflow.sweep.expand import load_sweep
    from workflow.sweep.plan import plan
    return {p.stage: {k: v for k, v in p.counts.items() if v} for p in plan(load_sweep(sweep), results)}


def test_tiny_sweep_end_to_end_then_cached_then_one_change(tmp_path):
    sweep = write_sweep(tmp_path / "tiny.yaml", "tiny", GRID)
    assert planned(sweep, tmp_path / "results") == {"sft": {"new": 1}, "rl": {"new": 2}, "eval": {"new": 2}}
    first = snakemake(tmp_path, sweep)  # (its time is no assertion: it doubles with the machine's load and speed)
    assert first.returncode == 0, first.stderr[-3000:]

    results = tmp_path / "results"
    out = cli("--results", str(results), "query",
                  "select run_id, avg(avg_at_k) from eval_scores group by all", "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.strip().splitlines()) == 1 + 2  # header + one row per RL run
    assert (results / "tiny" / "summary.md").read_text().count("| arithmetic | grpo |") == 2  # two settings
    report = (results / "tiny" / "report" / "report.md").read_text()  # the DAG's last rule: the sweep's report
    assert "| rl.lr=0.0001 | grpo |" in report and "| rl.lr=0.0002 | grpo |" in report
    runs = cli("--results", str(results), "query",
                   "select stage, count(*) n, count_if(status = 'completed') ok from runs group by all order by stage",
                   "--format", "json")
    # two RL runs share one SFT job; every stage recorded as completed
    assert json.loads(runs.stdout) == [{"stage": "eval", "n": 2, "ok": 2}, {"stage": "rl", "n": 2, "ok": 2},
                                       {"stage": "sft", "n": 1, "ok": 1}]

    assert planned(sweep, results) == {"sft": {"done": 1}, "rl": {"done": 2}, "eval": {"done": 2}}
    assert_a_cpu_only_run_reports_no_gpu_hours(sweep, results)
    # a second run after success does nothing
    before = mtimes(results)
    again = snakemake(tmp_path, sweep)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    assert mtimes(results) == before

    # change one hyperparameter value: only its run re-runs, plus the aggregate and the report
    sweep.write_text(sweep.read_text().replace("2.0e-4", "3.0e-4"))
    plan = snakemake(tmp_path, sweep, "-n")
    assert planned_jobs(plan.stdout) == {"rl": 1, "eval": 1, "aggregate": 1, "report": 1, "all": 1}, \
        plan.stdout[-2000:]
    assert planned(sweep, results) == {"sft": {"done": 1}, "rl": {"done": 1, "new": 1}, "eval": {"done": 1, "new": 1}}
    changed = snakemake(tmp_path, sweep)
    assert changed.returncode == 0, changed.stderr[-3000:]
    after = mtimes(results)
    assert all(after[k] == v for k, v in before.items()  # (executor.json: where this start ran its jobs)
               if k in after and "summary.md" not in k and "/report/" not in k and "executor.json" not in k)
    assert set(before) - set(after) == set()  # nothing computed before was deleted


def assert_a_cpu_only_run_reports_no_gpu_hours(sweep: Path, results: Path) -> None:
    """Issue 82, item 2 (on the run above, which had no GPU): the start recorded where the jobs ran, every runs row
    says gpus 0, and status, plan and the report count plain hours, though the default resources ask SLURM for a GPU
    per job."""
    executor = json.loads((results / "tiny" / "executor.json").read_text())
    assert (executor["kind"], executor["slots"], executor["gpus"]) == ("local", 2, 0)
    rows = json.loads(cli("--results", str(results), "query", "select stage, gpus, gpu_kind, gpu_hours from runs",
                          "--format", "json").stdout)
    assert rows and all(r["gpus"] == 0 and r["gpu_kind"] is None and r["gpu_hours"] is None for r in rows), rows
    for command in ("status", "plan"):
        out = cli("--results", str(results), command, str(sweep), env={"COLUMNS": "200"})
        assert out.returncode == 0 and "GPU-hours" not in out.stdout + out.stderr, out.stdout + out.stderr
    status = cli("--results", str(results), "status", str(sweep), env={"COLUMNS": "200"}).stdout
    assert "planned hours" in " ".join(status.split()), status
    report = (results / "tiny" / "report" / "report.md").read_text()
    cost = report[report.index("Cost: planned against used"):].split("\n## ")[0]
    assert "planned hours" in cost and "GPU-hours" not in cost, cost


def test_bad_sweep_fails_before_any_job_with_file_key_and_reason(tmp_path):
    sweep = write_sweep(tmp_path / "bad.yaml", "bad", "grid:\n  rl.clip_hihg: [0.2]\n")
    res = snakemake(tmp_path, sweep)
    assert res.returncode != 0
    assert f"{sweep}: grid.rl.clip_hihg: unknown key 'clip_hihg' in rl; did you mean 'clip_high'?" in res.stderr
    assert not (tmp_path / "results").exists()
    missing = snakemake(tmp_path, tmp_path / "nope.yaml")
    assert missing.returncode != 0 and "nope.yaml: sweep file not found" in missing.stderr


def test_runs_starting_from_one_checkpoint_evaluate_it_once_and_without_waiting_for_rl(tmp_path):
    """eval.at_start: two seeds start from one SFT checkpoint; its step-0 evaluation runs once, as soon as the SFT
    stage is done, and the other run's step-0 job copies the rows. Snakemake is asked for the copy only: what it
    needs is the SFT stage and the one evaluation, no RL job (the runs' later steps are every other sweep's)."""
    from workflow.layout import done_path
    from workflow.sweep.expand import load_sweep
    from workflow.sweep.plan import plan
    sweep = write_sweep(tmp_path / "st.yaml", "st", "seeds: [0, 1]\n")
    sweep.write_text(sweep.read_text().replace("eval: {k: 2, max_new_tokens: 16}",
                                               "eval: {k: 2, max_new_tokens: 16, at_start: true}"))
    first, second = load_sweep(sweep).runs
    results = tmp_path / "results"
    evals = next(p for p in plan(load_sweep(sweep), results) if p.stage == "eval")
    # the copy needs no time or GPU of its own, and is no new job (issue 82: counted apart)
    assert evals.counts["new"] == 3 and evals.copies == 1 and evals.bounded == 3
    copied = done_path(results, "eval", second.eval_id, second.run_id, 0, "arithmetic")
    dry = snakemake(tmp_path, sweep, "-n", str(copied.relative_to(tmp_path)))  # it needs the SFT stage, not RL
    assert planned_jobs(dry.stdout) == {"sft": 1, "eval_start": 1, "eval_copy": 1}, dry.stdout[-2000:]

    res = snakemake(tmp_path, sweep, "-p", str(copied.relative_to(tmp_path)))  # (an option ends --config)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(copied.read_text())["copied_from"] == {"run_id": first.run_id, "eval_id": first.eval_id}
    rows = json.loads(cli("--results", str(results), "query",
                              "select parent_id, eval_step, backend from runs where stage = 'eval' order by all",
                              "--format", "json").stdout)
    assert sorted((r["parent_id"], r["eval_step"], r["backend"] == "copy") for r in rows) == sorted(
        [(first.run_id, 0, False), (second.run_id, 0, True)])
    scores = json.loads(cli("--results", str(results), "query",
                                "select run_id, eval_id, step, k, avg_at_k, pass_at_k, mean_len from eval_scores "
                                "where step = 0 order by k, run_id", "--format", "json").stdout)
    assert {(r["run_id"], r["eval_id"]) for r in scores} == {(first.run_id, first.eval_id),
                                                            (second.run_id, second.eval_id)}
    values = {r["run_id"]: [] for r in scores}
    for r in scores:
        values[r["run_id"]].append((r["k"], r["avg_at_k"], r["pass_at_k"], r["mean_len"]))
    assert values[first.run_id] == values[second.run_id]  # the same numbers, under each run's own ids
    samples = cli("--results", str(results), "query",
                      "select run_id, count(*) n from eval_samples where step = 0 group by all", "--format", "json")
    assert sorted(r["n"] for r in json.loads(samples.stdout)) == [32, 32]  # 16 problems x k=2, both runs
    assert {p.stage: p.counts.get("done", 0) for p in plan(load_sweep(sweep), results)} == {"sft": 1, "rl": 0, "eval": 2}
