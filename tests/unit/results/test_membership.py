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

import pyarrow as pa
import pyarrow.parquet as pq

from helpers import REPO, cli, write_sweep
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
    finished_rl(tmp_path, "a", "0000000000a1", "x=1")
    finished_rl(tmp_path, "b", "0000000000a2", "x=2")
    damaged = record(tmp_path, "a", [Member("rl", "0000000000a1", "x=1")])
    record(tmp_path, "b", [Member("rl", "0000000000a2", "x=2")])
    cut_in_half(damaged)
    return tmp_path, damaged


def test_every_sweep_and_the_other_sweeps_still_answer_and_the_damaged_record_is_named(two_sweeps, capsys):
    root, damaged = two_sweeps
    everyone = Catalog(root)
    assert [d.path for d in everyone.damaged_members] == [damaged]
    rows = everyone.query("select run_id, sweep from runs order by run_id").to_pylist()
    assert rows == [dict(run_id="0000000000a1", sweep="a"), dict(run_id="0000000000a2", sweep="b")]  # no "No magic bytes" for all
    assert everyone.query("select sweep from membership").to_pylist() == [dict(sweep="b")]
    assert Catalog(root, "b").query("select run_id from runs").to_pylist() == [dict(run_id="0000000000a2")]
    with pytest.raises(QueryError, match=rf"sweep 'a' planned does not read: {damaged}.*doctor --sweep a --fix"):
        Catalog(root, "a").query("select count(*) from runs")
    out = cli("--results", str(root), "query", "select count(*) n from runs", "--format", "json")
    assert out.returncode == 0 and json.loads(out.stdout) == [{"n": 2}]
    assert f"left out unreadable membership record {damaged}" in out.stderr


def test_planning_the_sweep_again_writes_a_damaged_record_anew(two_sweeps):
    root, damaged = two_sweeps
    assert damage(damaged) is not None and members(root, "a") == {}
    assert record(root, "a", [Member("rl", "0000000000a1", "x=1")]) == damaged  # the same plan: the same name, rewritten
    assert damage(damaged) is None and members(root, "a") == {("rl", "0000000000a1"): "x=1"}
    assert record(root, "a", [Member("rl", "0000000000a1", "x=1")]) is None  # and, readable, not written again


def test_doctor_lists_a_damaged_record_and_fix_rebuilds_it_from_the_sweep_file(two_sweeps, tmp_path):
    root, damaged = two_sweeps
    report = examine(root, "a")
    (problem,) = [p for p in report.problems if p.subject == damaged]
    assert problem.kind == "damaged" and "unreadable membership record of sweep 'a'" in problem.what
    assert "from the runs rows of the 1 stage jobs sweep 'a' computed" in problem.recompute
    assert "rlsweep doctor SWEEP.yaml --fix" in problem.recompute  # (a sweep's reused stage jobs: in its plan)
    sweep_file = write_sweep(tmp_path / "a.yaml", "a", "grid:\n  rl.lr: [1.0e-4]\nseeds: [0]\n")
    from workflow.sweep.expand import load_sweep
    sweep = load_sweep(sweep_file)
    planned = {(m.stage, m.stage_id): m.label for m in sweep.members()}
    report = examine(root, "a", str(sweep_file), sweep.members)
    _, moved = quarantine(report)
    assert [src for src, _ in moved] == [damaged] and damage(damaged) is None
    assert members(root, "a") == planned and member_files(root, "a") == [damaged]
    assert damage(moved[0][1]) is not None  # the damaged bytes are kept, in quarantine
    assert not [p for p in examine(root, "a", str(sweep_file), sweep.members).problems if p.subject == damaged]


def test_doctor_never_calls_a_sweep_it_knows_nothing_of_healthy(tmp_path):
    (tmp_path / "c").mkdir()  # a sweep directory without any record of what the sweep planned
    out = cli("--results", str(tmp_path), "doctor", "--sweep", "c")
    assert out.returncode == 1 and "no record of which stage jobs sweep 'c' planned" in out.stdout, out
    assert "healthy" not in out.stderr
    record(tmp_path, "c", [Member("rl", "0000000000a9", "x=9")])  # recorded (snakemake), nothing run: said so, exit 0
    out = cli("--results", str(tmp_path), "doctor", "--sweep", "c")
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
    out = cli("--results", str(tmp_path), "status", str(sweep_file), env={"COLUMNS": "200"})
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


def test_without_the_sweep_file_fix_rebuilds_a_damaged_record_from_the_runs_rows_labels(two_sweeps):
    """As `rlsweep migrate` does: each stage job whose runs row names the sweep, under that row's label."""
    root, damaged = two_sweeps
    finished_rl(root, "a", "0000000000a4", "x=4")  # a second run of a's, computed after the record was written
    out = cli("--results", str(root), "doctor", "--sweep", "a", "--fix")
    assert out.returncode == 1 and f"moved to quarantine:\n  {damaged.relative_to(root)}" in out.stdout, out
    assert members(root, "a") == {("rl", "0000000000a1"): "x=1", ("rl", "0000000000a4"): "x=4"}
    assert members(root, "b") == {("rl", "0000000000a2"): "x=2"}  # b's own record untouched
    healthy = cli("--results", str(root), "doctor", "--sweep", "a")
    assert healthy.returncode == 0 and "a: healthy (2 table files readable, 2 stage directories" in healthy.stderr
    rows = Catalog(root, "a").query("select run_id, label from runs order by run_id").to_pylist()
    assert rows == [dict(run_id="0000000000a1", label="x=1"), dict(run_id="0000000000a4", label="x=4")]


def test_a_damaged_record_of_a_sweep_no_runs_row_names_asks_for_its_plan(tmp_path):
    damaged = record(tmp_path, "c", [Member("rl", "0000000000a9", "x=9")])
    cut_in_half(damaged)
    (problem,) = examine(tmp_path, "c").problems
    assert problem.restore is None and "no runs row names sweep 'c'" in problem.recompute
    assert "rlsweep doctor SWEEP.yaml --fix" in problem.recompute and problem.move == [damaged]


FOREIGN = {  # readable Parquet files under a table's folder that no stage job wrote (issue 45, item 2)
    "a name no stage writes": "zz_foreign",
    "a stage id that is no content id": "rl_r1",
    "a copy beside its original": "rl_0000000000a2 (copy)",
}


@pytest.mark.slow  # seconds of work (Snakemake runs, every shipped sweep): the fast tier stays under 2 min
@pytest.mark.parametrize("name", FOREIGN.values(), ids=FOREIGN.keys())
def test_a_readable_file_no_stage_job_wrote_is_reported_in_every_view_and_moved_aside_by_fix(two_sweeps, name):
    """Before: such a file was read into every all-sweeps query as if a stage had written it (its rows counted),
    skipped without a word in a sweep's views, and never listed by doctor."""
    root, _ = two_sweeps
    from workflow.layout import table_dir
    foreign = table_dir(root, "runs") / f"{name}.parquet"
    pq.write_table(pa.table({"run_id": ["0000000000f0"], "sweep": ["b"], "stage": ["rl"]}), foreign)
    for sweep in (None, "b"):
        catalog = Catalog(root, sweep)
        assert [d.path for d in catalog.foreign] == [foreign] and foreign in [d.path for d in catalog.left_out]
        assert "0000000000f0" not in catalog.query("select run_id from runs").column("run_id").to_pylist()
    for where in ((), ("--sweep", "b")):
        out = cli("--results", str(root), "query", *where, "select count(*) n from runs", "--format", "json")
        assert out.returncode == 0 and f"warning: left out runs file {foreign}: no stage job writes this name" \
            in out.stderr, out
    out = cli("--results", str(root), "doctor", "--sweep", "b")
    assert out.returncode == 1 and f"foreign: {foreign.relative_to(root)}" in out.stdout, out
    before = Catalog(root, "b").query("select * from runs").to_pylist()
    fixed = cli("--results", str(root), "doctor", "--sweep", "b", "--fix")
    assert fixed.returncode == 1 and not foreign.exists() and "fixed; nothing to recompute" in fixed.stderr, fixed
    (kept,) = (root / "_store" / "quarantine").glob(f"*/tables/runs/{name}.parquet")
    assert pq.read_table(kept)["run_id"].to_pylist() == ["0000000000f0"]  # moved aside, never deleted
    healthy = cli("--results", str(root), "doctor", "--sweep", "b")
    assert healthy.returncode == 0 and "b: healthy" in healthy.stderr, healthy
    assert Catalog(root, "b").query("select * from runs").to_pylist() == before  # the sweep's rows intact


def test_the_writer_refuses_a_name_the_catalog_would_leave_out(tmp_path):
    row = dict(run_id="0000000000a1", sweep="s", stage="rl")
    for name in ("rl_r1", "zz_0000000000a1", "rl_0000000000a1_5_math"):  # (only an eval job's runs file has a group)
        with pytest.raises(ValueError, match=f"runs file name '{name}' is no stage job's: a stage job's is <stage>_<id>"):
            write_rows(tmp_path, "runs", name, [row])
    assert not list(tmp_path.rglob("*.parquet"))


def test_every_name_a_writer_produces_is_a_stage_jobs_and_names_its_stage_job():
    """One rule (layout.parse_table_file) for the names the writers give (layout.runs_file, ...): over every stage,
    benchmark group, benchmark and grader rlsweep has, a name parses back to the stage job that wrote it."""
    from workflow.benchmarks.catalog import REGISTRY
    from workflow.benchmarks.graders import GRADERS
    from workflow.layout import (STAGES, eval_file, grades_file, parse_table_file, train_steps_file)
    from workflow.identity import stable_id
    run, job = stable_id({"run": 1}), stable_id({"eval": 1})
    for stage in STAGES:
        if stage == "eval":
            for group in sorted({REGISTRY[b].group for b in REGISTRY}):
                owner = parse_table_file("runs", runs_file("eval", job, 40, group))
                assert (owner.stage, owner.stage_id, owner.step, owner.group) == ("eval", job, 40, group)
        else:
            owner = parse_table_file("runs", runs_file(stage, job))
            assert (owner.stage, owner.stage_id, owner.group) == (stage, job, None)
            owner = parse_table_file("train_steps", train_steps_file(stage, job, 21, 40))
            assert (owner.stage, owner.stage_id, owner.first, owner.last) == (stage, job, 21, 40)
    for benchmark in REGISTRY:
        for table in ("eval_samples", "eval_scores"):
            owner = parse_table_file(table, eval_file(run, job, 0, benchmark))
            assert (owner.run_id, owner.stage_id, owner.step, owner.benchmark) == (run, job, 0, benchmark)
        for grader in GRADERS:
            owner = parse_table_file("eval_grades", grades_file(run, job, 80, benchmark, grader))
            assert (owner.run_id, owner.stage_id, owner.benchmark, owner.grader) == (run, job, benchmark, grader)


def test_a_files_stage_job_key_is_what_its_parsed_name_says():
    """layout.table_file_key reads (stage, stage id) from the name's match alone (a sweep's query asks it of every
    stem a pack holds); it must say what parse_table_file says, for the writers' names and for names no stage
    writes (a runs file of a non-eval stage with a step and group, a stray name, another table's name)."""
    from workflow.layout import STAGES, eval_file, grades_file, parse_table_file, table_file_key, train_steps_file
    from workflow.identity import stable_id
    run, job = stable_id({"run": 1}), stable_id({"eval": 1})
    stems = [runs_file("eval", job, 40, "math"), f"rl_{job}_40_math", "notes", f"{run}_{job}_step000000_aime24",
             eval_file(run, job, 0, "aime24"), grades_file(run, job, 80, "math500", "math_verify"),
             *(runs_file(s, job) for s in STAGES if s != "eval"),
             *(train_steps_file(s, job, 1, 20) for s in STAGES if s != "eval")]
    checked = 0
    for table in ("runs", "train_steps", "eval_samples", "eval_scores", "eval_grades", "no_such_table"):
        for stem in stems:
            owner = parse_table_file(table, stem)
            assert table_file_key(table, stem) == (None if owner is None else (owner.stage, owner.stage_id)), \
                (table, stem)
            checked += owner is not None
    assert checked >= len(stems) - 2  # (most stems are some table's)


def test_a_catalog_excluding_stage_jobs_never_opens_their_files_and_still_reads_the_rest(tmp_path):
    # `rlsweep watch` asks the store for what other sweeps measured (issue 83): its own jobs' files it has read
    # already, and at 10,000 runs opening them again was most of its first look
    root = tmp_path / "results"
    mine, other = "a" * 12, "b" * 12
    for rid in (mine, other):
        write_rows(root, "runs", runs_file("rl", rid), [{"run_id": rid, "sweep": "s", "stage": "rl",
                                                          "status": "completed", "wall_s": 1.0}])
    damaged = next(p for p in (root / "_store" / "tables" / "runs").iterdir() if mine in p.name)
    damaged.write_bytes(b"not parquet")  # were it opened, the catalog would report it
    catalog = Catalog(root, excluding={("rl", mine)})
    assert catalog.query("SELECT run_id FROM runs").column("run_id").to_pylist() == [other]
    assert catalog.left_out == []
    assert [d.path for d in Catalog(root).left_out] == [damaged]
