"""The shared store (workflow/layout.py, results/membership.py): a stage is computed once across sweeps, every query
counts it once, a sweep's views show every run it planned, `rlsweep gc` collects only what no sweep references, and
results made before the store (tests/fixtures/legacy_results.tar.gz, made by the commit before it) keep working."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers import REPO, cli, planned_jobs, run_cli, snakemake, write_sweep
from workflow.layout import (STORE, done_path, members_dir, runs_file, stage_dir, store_dir, table_dir,
                             train_steps_file)
from workflow.results.catalog import Catalog
from workflow.results.compaction import compact
from workflow.results.membership import Member, member_files, members, record
from workflow.results.writer import write_rows

pytestmark = pytest.mark.slow  # not in the fast tier: sweeps through Snakemake

BASE_GRID = "grid:\n  rl.lr: [1.0e-4]\nseeds: [0]\n"
ABLATION_GRID = "grid:\n  rl.lr: [1.0e-4, 2.0e-4]\nseeds: [0]\n"


def query(results: Path, sql: str, *extra: str) -> list[dict]:
    """The rows `rlsweep --results RESULTS query SQL --format json [--sweep S]` prints (in this process)."""
    out = cli("--results", str(results), "query", sql, "--format", "json", *extra)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def sweep_log_jobs(out) -> dict[str, int]:
    """The jobs a (real) snakemake run planned, from its 'Job stats' table."""
    return planned_jobs(out.stdout + out.stderr)


def test_a_second_sweep_reuses_what_the_first_computed(tmp_path):
    base = write_sweep(tmp_path / "base.yaml", "base", BASE_GRID)
    ablation = write_sweep(tmp_path / "ablation.yaml", "ablation", ABLATION_GRID)
    first = snakemake(tmp_path, base)
    assert first.returncode == 0, first.stderr[-3000:]
    results = tmp_path / "results"

    # before the second sweep runs, `rlsweep plan` shows the shared SFT (and RL run, and its eval) done
    plan = cli("--results", str(results), "plan", str(ablation))
    assert plan.returncode == 0, plan.stderr
    assert "sft: 1 of the done jobs came from another sweep (1 from base)" in plan.stderr
    assert "rl: 1 of the done jobs came from another sweep (1 from base)" in plan.stderr
    second = snakemake(tmp_path, ablation)
    assert second.returncode == 0, second.stderr[-3000:]
    jobs = sweep_log_jobs(second)
    assert "sft" not in jobs and jobs["rl"] == 1 and jobs["eval"] == 1, jobs  # only the new learning rate
    assert "rule sft" not in second.stdout + second.stderr

    # every sweep: one SFT, two RL runs, each once; each sweep's view: every run it planned, under its own name
    everything = "select stage, count(*) n from runs group by all order by stage"
    assert query(results, everything) == [{"stage": "eval", "n": 2}, {"stage": "rl", "n": 2}, {"stage": "sft", "n": 1}]
    assert query(results, everything, "--sweep", "ablation") == query(results, everything)
    assert query(results, everything, "--sweep", "base") == [{"stage": "eval", "n": 1}, {"stage": "rl", "n": 1},
                                                             {"stage": "sft", "n": 1}]
    seen = query(results, "select sweep, computed_by, label from runs where stage = 'rl' order by label",
                 "--sweep", "ablation")
    assert seen == [{"sweep": "ablation", "computed_by": "base", "label": "rl.lr=0.0001"},
                    {"sweep": "ablation", "computed_by": "ablation", "label": "rl.lr=0.0002"}]
    assert query(results, "select count(*) n from eval_scores where sweep = 'ablation'", "--sweep", "ablation") == \
        query(results, "select count(*) n from eval_scores")
    assert query(results, "select sweep, count(*) n from membership where stage = 'rl' group by all order by sweep") \
        == [{"sweep": "ablation", "n": 2}, {"sweep": "base", "n": 1}]

    # status and report say where the reused stages came from
    status = cli("--results", str(results), "status", str(ablation), env={"COLUMNS": "250"})
    assert status.returncode == 0, status.stderr
    assert status.stdout.count("done (from base)") == 3  # both runs' SFT, and the shared run's RL
    assert "reused from other sweeps (the shared store): 3 stage jobs from base" in status.stderr
    report = (results / "ablation" / "report" / "report.md").read_text()
    assert "(from base)" in report and "Reused from other sweeps, not trained again: SFT" in report

    # running the first sweep again does nothing: its stages are where they were
    again = snakemake(tmp_path, base)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def test_membership_records_each_plan_once_and_only_ever_grows(tmp_path):
    a = [Member("sft", "0000000000b1"), Member("rl", "0000000000a1", "lr=1")]
    first = record(tmp_path, "sw", a)
    assert first is not None and record(tmp_path, "sw", a) is None  # the same plan: nothing written
    grown = record(tmp_path, "sw", [*a, Member("rl", "0000000000a2", "lr=2")])  # a study's next trial: replaces the smaller
    assert member_files(tmp_path, "sw") == [grown]
    other = record(tmp_path, "sw", [Member("rl", "0000000000a3", "lr=3")])  # an edited sweep: a new set beside the old
    assert sorted(member_files(tmp_path, "sw")) == sorted([grown, other])
    assert members(tmp_path, "sw") == {("sft", "0000000000b1"): None, ("rl", "0000000000a1"): "lr=1", ("rl", "0000000000a2"): "lr=2",
                                       ("rl", "0000000000a3"): "lr=3"}
    record(tmp_path, "sw", [Member("rl", "0000000000a1", "relabelled")])  # the newest label wins
    assert members(tmp_path, "sw")[("rl", "0000000000a1")] == "relabelled"


def _rl_rows(root: Path, sweep: str, run_id: str, label: str, steps: int = 2) -> None:
    write_rows(root, "runs", runs_file("rl", run_id), [dict(run_id=run_id, sweep=sweep, stage="rl", label=label,
                                                            status="completed")])
    write_rows(root, "train_steps", train_steps_file("rl", run_id, 1, steps),
               [dict(run_id=run_id, sweep=sweep, stage="rl", step=s, loss=1.0) for s in range(1, steps + 1)])
    done_path(root, "rl", run_id).parent.mkdir(parents=True, exist_ok=True)
    done_path(root, "rl", run_id).write_text(json.dumps({"stage": "rl", "id": run_id}))


def test_views_read_shared_rows_once_before_and_after_compaction(tmp_path):
    _rl_rows(tmp_path, "a", "0000000000a1", "x=1")
    _rl_rows(tmp_path, "b", "0000000000a2", "x=2")
    record(tmp_path, "a", [Member("rl", "0000000000a1", "x=1")])
    record(tmp_path, "b", [Member("rl", "0000000000a1", "shared"), Member("rl", "0000000000a2", "x=2")])
    for compacted in (False, True):
        if compacted:
            assert compact(tmp_path) and not list(table_dir(tmp_path, "runs").glob("rl_*.parquet"))
        everyone = Catalog(tmp_path).query("select run_id, sweep, computed_by, label from runs order by run_id")
        assert everyone.to_pylist() == [dict(run_id="0000000000a1", sweep="a", computed_by="a", label="x=1"),
                                        dict(run_id="0000000000a2", sweep="b", computed_by="b", label="x=2")]
        b = Catalog(tmp_path, "b").query("select run_id, sweep, computed_by, label from runs order by run_id")
        assert b.to_pylist() == [dict(run_id="0000000000a1", sweep="b", computed_by="a", label="shared"),
                                 dict(run_id="0000000000a2", sweep="b", computed_by="b", label="x=2")]
        a = Catalog(tmp_path, "a")
        assert a.query("select count(*) n, sum(loss) s from train_steps").to_pylist() == [dict(n=2, s=2.0)]
        assert [p.name for p in a.files["runs"]] in (["rl_0000000000a1.parquet"], [p.name for p in a.layouts["runs"].packs])


def _gc(results: Path, *args: str, cwd: Path):
    return cli("--results", str(results), "gc", *args, cwd=cwd)


def test_gc_lists_and_removes_only_what_no_sweep_references(tmp_path):
    results = tmp_path / "results"
    keep = write_sweep(tmp_path / "keep.yaml", "keep", BASE_GRID)
    from workflow.sweep.expand import load_sweep
    kept = load_sweep(keep)
    record(results, "keep", kept.members())
    run = kept.runs[0]
    _rl_rows(results, "keep", run.run_id, "kept")
    _rl_rows(results, "old", "deadbeef0001", "gone")  # a run of an edited sweep: no sweep references it now
    _rl_rows(results, "old", "deadbeef0002", "packed")
    _rl_rows(results, "old", "deadbeef0003", "rows only")  # its directory removed by hand after compaction
    record(results, "old", [Member("rl", "deadbeef0001")])  # ... but this record is of a sweep with a file: below
    old = write_sweep(tmp_path / "old.yaml", "old", "grid:\n  rl.lr: [5.0e-4]\nseeds: [0]\n")
    compact(results)  # deadbeef0002's rows live in a pack with the kept run's
    shutil.rmtree(stage_dir(results, "rl", "deadbeef0003"))
    write_rows(results, "runs", runs_file("rl", "deadbeef0002"),  # and again as a small file (a rerun)
               [dict(run_id="deadbeef0002", sweep="old", stage="rl", status="completed")])
    checkpoint = stage_dir(results, "rl", "deadbeef0001") / "checkpoints" / "step_000002" / "model.bin"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"x" * 2**20)

    listed = _gc(results, str(keep), str(old), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "deadbeef0001" in listed.stdout and "deadbeef0002" in listed.stdout and run.run_id not in listed.stdout
    assert "nothing removed" in listed.stderr and stage_dir(results, "rl", "deadbeef0001").is_dir()
    assert "(1 stage job(s) with rows but no directory)" in listed.stderr  # deadbeef0003: packed rows alone
    # without the sweep file of `old`, what it planned keeps deadbeef0001 (never forgotten by accident)
    kept_by_record = _gc(results, str(keep), cwd=tmp_path)
    assert "deadbeef0001" not in kept_by_record.stdout and "deadbeef0002" in kept_by_record.stdout
    # --remove asks first; with no terminal to ask at it refuses
    refused = _gc(results, str(keep), str(old), "--remove", cwd=tmp_path)
    assert refused.returncode == 2 and "--yes" in refused.stderr and stage_dir(results, "rl", "deadbeef0001").is_dir()

    # never while a stage of the store runs (a live RUNNING.lock: this test's own process)
    from workflow.runlock import run_lock
    with run_lock(stage_dir(results, "rl", run.run_id), "rl"):
        busy = _gc(results, str(keep), str(old), "--remove", "--yes", cwd=tmp_path)
    assert busy.returncode == 2 and "running" in busy.stderr and stage_dir(results, "rl", "deadbeef0001").is_dir()

    removed = _gc(results, str(keep), str(old), "--remove", "--yes", cwd=tmp_path)
    assert removed.returncode == 0, removed.stderr
    assert not any(stage_dir(results, "rl", f"deadbeef000{i}").exists() for i in (1, 2))
    assert Catalog(results).query("select run_id from runs").to_pylist() == [dict(run_id=run.run_id)]
    assert Catalog(results).query("select distinct run_id from train_steps").to_pylist() == [dict(run_id=run.run_id)]
    assert stage_dir(results, "rl", run.run_id).is_dir()
    again = _gc(results, str(keep), str(old), cwd=tmp_path)
    assert "nothing to collect" in again.stderr


def test_gc_refuses_a_sweep_file_that_does_not_load(tmp_path):
    bad = write_sweep(tmp_path / "bad.yaml", "bad", "grid:\n  rl.lrr: [1.0]\n")
    out = _gc(tmp_path / "results", str(bad), cwd=tmp_path)
    assert out.returncode == 2 and "does not load" in out.stderr and "lrr" in out.stderr


# ----------------------------------------------------------------------------------------------------- migration
LEGACY = REPO / "tests" / "fixtures" / "legacy_results.tar.gz"


@pytest.fixture
def legacy(tmp_path) -> Path:
    """A working directory as the commit before the store left it (tests/fixtures/legacy_results.md says how it
    was made): sweeps `base` and `ablation` run one after the other, each with its own copy of the shared SFT and
    RL run, `base` compacted."""
    with tarfile.open(LEGACY) as t:
        t.extractall(tmp_path, filter="data")
    return tmp_path


def test_results_made_before_the_store_are_migrated_and_keep_working(legacy):
    results = legacy / "results"
    assert (results / "base" / "sft").is_dir() and not (results / STORE).exists()
    done_files = {p.stat().st_ino: p.stat().st_mtime_ns for p in results.rglob("DONE.json")}
    # a dry run moves nothing (it writes nothing), so it cannot plan on them: it says how to move them
    dry = snakemake(legacy, legacy / "base.yaml", "-n")
    assert dry.returncode == 1 and "holds results of the layout before the shared store (sweeps ablation, base)" \
        in dry.stderr and "`rlsweep --results results migrate`" in dry.stderr, dry.stderr[-2000:]
    assert (results / "base" / "sft").is_dir() and not (results / STORE).exists()
    everything = "select stage, count(*) n from runs group by all order by stage"
    # the first command that reads results migrates them: each run once, though both sweeps computed the shared ones
    assert query(results, everything) == [{"stage": "eval", "n": 2}, {"stage": "rl", "n": 2}, {"stage": "sft", "n": 1}]
    assert not (results / "base" / "sft").exists() and not (results / "ablation" / "tables").exists()
    assert query(results, everything, "--sweep", "base") == [{"stage": "eval", "n": 1}, {"stage": "rl", "n": 1},
                                                             {"stage": "sft", "n": 1}]
    labels = query(results, "select label from runs where stage = 'rl' order by label", "--sweep", "ablation")
    assert labels == [{"label": "rl.lr=0.0001"}, {"label": "rl.lr=0.0002"}]
    # the second sweep's copies of the shared stages went to quarantine, not away
    aside = list((store_dir(results) / "quarantine").glob("*-migrate/ablation/sft/*/DONE.json"))
    assert len(aside) == 1
    # DONE.json files moved untouched (Snakemake compares their times): nothing is trained or evaluated again
    for sweep in ("base", "ablation"):
        dry = snakemake(legacy, legacy / f"{sweep}.yaml", "-n")
        assert dry.returncode == 0, dry.stderr[-3000:]
        assert not set(planned_jobs(dry.stdout)) & {"sft", "rl", "eval", "eval_start", "data"}, dry.stdout[-2000:]
    assert {p.stat().st_ino: p.stat().st_mtime_ns for p in results.rglob("DONE.json")} == done_files  # renamed
    # a changed sweep runs on the migrated store: only what it changes
    ablation = legacy / "ablation.yaml"
    ablation.write_text(ablation.read_text().replace("2.0e-4", "3.0e-4"))
    ran = snakemake(legacy, ablation)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert sweep_log_jobs(ran).get("sft") is None and sweep_log_jobs(ran)["rl"] == 1
    assert members_dir(results, "ablation").is_dir()
    assert pq.read_table(member_files(results, "base")[0]).num_rows >= 3
    shutil.rmtree(legacy / ".snakemake", ignore_errors=True)


def test_rlsweep_migrate_waits_for_a_stage_still_running_under_the_old_layout(legacy):
    from workflow.runlock import run_lock
    results = legacy / "results"
    running = next((results / "base" / "rl").iterdir())
    with run_lock(running, "an RL stage of the old layout"):
        held = run_cli("--results", str(results), "migrate", cwd=legacy)
    assert held.returncode == 1 and "base: not migrated yet" in held.stderr and "is running" in held.stderr
    assert running.is_dir()  # left where its job writes
    done = run_cli("--results", str(results), "migrate", cwd=legacy)
    # (ablation went first: base's copies of the stages both computed are set aside, its packs move in)
    assert done.returncode == 0 and "base: 0 stage outputs and 4 table files moved into _store/" in done.stderr
    assert not running.exists() and not (results / "base" / "rl").exists()
    again = run_cli("--results", str(results), "migrate", cwd=legacy)
    assert again.returncode == 0 and "nothing to migrate" in again.stderr
