"""A sweep's record of its stage jobs (results/<sweep>/members/, results/membership.py) when it is damaged (issue 45):
a crash mid-write on a file system without atomic rename, a bad copy, a disk error. Queries over every sweep and
over the other sweeps keep answering, the damaged record is named wherever it is left out, `rlsweep doctor` lists
it, and planning the sweep again or `doctor --fix` with the sweep file writes it anew. Beside them, the store's other
records: doctor never calls a sweep it has no record of healthy, and status shows the runs beside a torn study
journal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import REPO, run_cli, write_sweep
from workflow.layout import done_path, runs_file
from workflow.results.catalog import Catalog, QueryError
from workflow.results.doctor import examine, quarantine
from workflow.results.membership import Member, damage, member_files, members, record
from workflow.results.writer import write_rows


def finished_rl(root: Path, sweep: str, run_id: str, label: str) -> None:
    write_rows(root, "runs", runs_file("rl", run_id), [dict(run_id=run_id, sweep=sweep, stage="rl", label=label,
                                                            status="completed")])
    done_path(root, "rl", run_id).parent.mkdir(parents=True, exist_ok=True)
    done_path(root, "rl", run_id).write_text(json.dumps({"stage": "rl", "id": run_id}))


def cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.fixture
def two_sweeps(tmp_path) -> tuple[Path, Path]:
    """Sweeps a and b with a finished run each; a's record cut to half its size."""
    finished_rl(tmp_path, "a", "r1", "x=1")
    finished_rl(tmp_path, "b", "r2", "x=2")
    damaged = record(tmp_path, "a", [Member("rl", "r1", "x=1")])
    record(tmp_path, "b", [Member("rl", "r2", "x=2")])
    cut_in_half(damaged)
    return tmp_path, damaged


def test_every_sweep_and_the_other_sweeps_still_answer_and_the_damaged_record_is_named(two_sweeps, capsys):
    root, damaged = two_sweeps
    everyone = Catalog(root)
    assert [d.path for d in everyone.damaged_members] == [damaged]
    rows = everyone.query("select run_id, sweep from runs order by run_id").to_pylist()
    assert rows == [dict(run_id="r1", sweep="a"), dict(run_id="r2", sweep="b")]  # no "No magic bytes" for all
    assert everyone.query("select sweep from membership").to_pylist() == [dict(sweep="b")]
    assert Catalog(root, "b").query("select run_id from runs").to_pylist() == [dict(run_id="r2")]
    with pytest.raises(QueryError, match=rf"sweep 'a' planned does not read: {damaged}.*snakemake -n"):
        Catalog(root, "a").query("select count(*) from runs")
    out = run_cli("--results", str(root), "query", "select count(*) n from runs", "--format", "json")
    assert out.returncode == 0 and json.loads(out.stdout) == [{"n": 2}]
    assert f"left out unreadable membership record {damaged}" in out.stderr


def test_planning_the_sweep_again_writes_a_damaged_record_anew(two_sweeps):
    root, damaged = two_sweeps
    assert damage(damaged) is not None and members(root, "a") == {}
    assert record(root, "a", [Member("rl", "r1", "x=1")]) == damaged  # the same plan: the same name, rewritten
    assert damage(damaged) is None and members(root, "a") == {("rl", "r1"): "x=1"}
    assert record(root, "a", [Member("rl", "r1", "x=1")]) is None  # and, readable, not written again


def test_doctor_lists_a_damaged_record_and_fix_rebuilds_it_from_the_sweep_file(two_sweeps, tmp_path):
    root, damaged = two_sweeps
    report = examine(root, "a")
    (problem,) = [p for p in report.problems if p.subject == damaged]
    assert problem.kind == "damaged" and "unreadable membership record of sweep 'a'" in problem.what
    assert "snakemake -n" in problem.recompute and problem.restore is None
    sweep_file = write_sweep(tmp_path / "a.yaml", "a", "grid:\n  rl.lr: [1.0e-4]\nseeds: [0]\n")
    from workflow.sweep.expand import load_sweep
    planned = {(m.stage, m.stage_id): m.label for m in load_sweep(sweep_file).members()}
    report = examine(root, "a", str(sweep_file))
    _, moved = quarantine(report)
    assert [src for src, _ in moved] == [damaged] and damage(damaged) is None
    assert members(root, "a") == planned and member_files(root, "a") == [damaged]
    assert damage(moved[0][1]) is not None  # the damaged bytes are kept, in quarantine
    assert not [p for p in examine(root, "a", str(sweep_file)).problems if p.subject == damaged]


def test_doctor_never_calls_a_sweep_it_knows_nothing_of_healthy(tmp_path):
    (tmp_path / "c").mkdir()  # a sweep directory without any record of what the sweep planned
    out = run_cli("--results", str(tmp_path), "doctor", "--sweep", "c")
    assert out.returncode == 1 and "no record of which stage jobs sweep 'c' planned" in out.stdout, out
    assert "healthy" not in out.stderr
    record(tmp_path, "c", [Member("rl", "r9", "x=9")])  # planned (snakemake -n), nothing run: said so, exit 0
    out = run_cli("--results", str(tmp_path), "doctor", "--sweep", "c")
    assert out.returncode == 0 and "c: nothing run yet" in out.stderr, out


def test_status_shows_the_runs_beside_a_damaged_study_journal(tmp_path):
    """Before: `rlsweep status` refused outright (exit 2) when the study's journal was torn."""
    import optuna
    from workflow.layout import default_journal
    from workflow.study.factory import open_storage
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sweep_file = REPO / "sweeps" / "optuna_sfpo_gxpo.yaml"
    journal = default_journal(tmp_path, "optuna_sfpo_gxpo")
    journal.parent.mkdir(parents=True)
    study = optuna.create_study(study_name="optuna_sfpo_gxpo", storage=open_storage(str(journal)))
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    journal.write_bytes(journal.read_bytes()[:-7])  # cut mid-record
    out = run_cli("--results", str(tmp_path), "status", str(sweep_file), env={"COLUMNS": "200"})
    assert out.returncode == 1, out
    assert "optuna_sfpo_gxpo: 0 runs" in out.stdout  # the runs table (no trial has recorded a run here)
    assert f"study journal {journal} is damaged at line" in out.stderr
    assert "rlsweep doctor --sweep optuna_sfpo_gxpo --fix" in out.stderr


@pytest.mark.parametrize("table", ["runs", "eval_scores"])
def test_a_damaged_file_under_a_name_no_stage_writes_is_reported_in_every_view(two_sweeps, table):
    """Before: `zz_foreign.parquet` in runs/ was taken for a stage job's (stage "zz"), so a sweep's view filtered it
    out unread: the all-sweeps query warned about it, `query --sweep` and doctor did not."""
    root, _ = two_sweeps
    from workflow.layout import table_dir
    foreign = table_dir(root, table) / "zz_foreign.parquet"
    foreign.parent.mkdir(parents=True, exist_ok=True)
    foreign.write_bytes(b"not parquet")
    for sweep in (None, "b"):
        assert foreign in [d.path for d in Catalog(root, sweep).damaged], sweep
    (problem,) = [p for p in examine(root, "b").problems if p.subject == foreign]
    assert "no stage writes that name" in problem.recompute and problem.move == [foreign]
