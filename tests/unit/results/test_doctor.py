"""A damaged or foreign file in a table folder does not take queries down, and `rlsweep doctor` finds what is wrong
and says how to recompute it, which is what Snakemake then does.

The results are a tiny sweep's, written by the stages themselves (sft -> rl -> eval), then damaged."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import REPO, SNAKEMAKE, cli, planned_jobs, snakemake, write_sweep
from workflow.launch import run_stage
from workflow.layout import store_dir
from workflow.results.membership import Member, record
from workflow.results.catalog import query
from workflow.results.writer import write_rows
from workflow.runlock import run_lock
from workflow.sweep.expand import Run, load_sweep


@dataclass
class Sweep:
    dir: Path  # Snakemake's working directory
    file: Path
    results: Path
    run: Run

    @property
    def base(self) -> Path:  # the shared store (layout.py), where the sweep's stages and tables are
        return store_dir(self.results)

    def table_file(self, table: str, prefix: str = "") -> Path:
        return next(p for p in sorted((self.base / "tables" / table).glob(f"{prefix}*.parquet")))

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return cli("--results", str(self.results), *args, cwd=self.dir, env={"COLUMNS": "200"})

    def doctor(self, *args: str) -> subprocess.CompletedProcess:
        res = self.cli("doctor", str(self.file), *args)
        assert "Traceback" not in res.stderr, res.stderr
        return res

    def rerun(self, stage: str) -> None:
        """What Snakemake's job for the stage runs (scripts/stage.py -> run_stage)."""
        r = self.run
        sft = self.base / "sft" / r.sft_id / "DONE.json"
        rl = self.base / "rl" / r.run_id / "DONE.json"
        if stage == "sft":
            run_stage("sft", "s", r.sft_id, r.stage_config("sft"), results_root=self.results)
        elif stage == "rl":
            run_stage("rl", "s", r.run_id, r.stage_config("rl"), results_root=self.results, init=sft, label=r.label)
        else:
            for step, group in r.eval_jobs:
                run_stage("eval", "s", r.eval_id, r.stage_config("eval"), results_root=self.results,
                          checkpoint_from=rl, label=r.label, step=step, group=group)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("finished")
    sweep_file = write_sweep(base / "s.yaml", "s")
    s = Sweep(base, sweep_file, base / "results", load_sweep(sweep_file).runs[0])
    record(s.results, "s", load_sweep(sweep_file).members())  # what Snakemake records when it plans the sweep
    for stage in ("sft", "rl", "eval"):
        s.rerun(stage)
    return base


@pytest.fixture
def sweep(finished, tmp_path) -> Sweep:
    work = tmp_path / "w"
    shutil.copytree(finished, work)
    return Sweep(work, work / "s.yaml", work / "results", load_sweep(work / "s.yaml").runs[0])


DAMAGE = {
    "empty": lambda p: p.write_bytes(b""),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "random bytes": lambda p: p.write_bytes(os.urandom(3000)),
    "a foreign schema": lambda p: pq.write_table(pa.table({"x": [1, 2]}), p),
    "an incompatible schema": lambda p: pq.write_table(pa.table({"run_id": ["r"], "status": [3.5]}), p),
}


# -------------------------------------------------------------------------------------- queries and status
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_one_damaged_file_leaves_queries_and_status_working_and_named(sweep, damage):
    bad = sweep.table_file("runs", "rl_")
    DAMAGE[damage](bad)
    res = sweep.cli("query", "SELECT stage, count(*) AS n FROM runs GROUP BY ALL ORDER BY stage", "--format", "json")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert json.loads(res.stdout) == [{"stage": "eval", "n": 1}, {"stage": "sft", "n": 1}]  # the readable files
    assert f"runs file {bad}" in res.stderr and "rlsweep doctor" in res.stderr

    status = sweep.cli("status", str(sweep.file))
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
    assert f"runs file {bad}" in status.stderr and f"affects run(s) {sweep.run.run_id}" in status.stderr
    assert sweep.run.run_id in status.stdout


def test_a_foreign_file_is_named_with_its_table_and_a_shared_stage_names_every_run_it_feeds(sweep):
    pq.write_table(pa.table({"x": [1]}), sweep.base / "tables" / "eval_samples" / "notes.parquet")
    DAMAGE["truncated"](sweep.table_file("train_steps", "sft_"))
    status = sweep.cli("status", str(sweep.file))
    assert status.returncode == 0, status.stderr
    lines = status.stderr.splitlines()
    assert any("eval_samples file" in line and "notes.parquet" in line and "no run_id column" in line
               for line in lines)
    assert any("train_steps file" in line and f"affects run(s) {sweep.run.run_id}" in line for line in lines)


def test_the_summary_says_what_it_left_out(tmp_path):
    from workflow.results.summary import write_summary
    write_rows(tmp_path, "runs", "rl_0000000000a1", [dict(run_id="0000000000a1", sweep="s", stage="rl", method="grpo", label="x")])
    write_rows(tmp_path, "eval_scores", "0000000000a1_0000000000e1_step000005_gsm8k",
               [dict(run_id="0000000000a1", eval_id="0000000000e1", sweep="s", step=5, benchmark="gsm8k", k=1, avg_at_k=0.5,
                     pass_at_k=0.5, n_samples=1, mean_len=3.0)])
    record(tmp_path, "s", [Member("rl", "0000000000a1"), Member("eval", "0000000000e1"), Member("eval", "0000000000e2")])
    (store_dir(tmp_path) / "tables" / "eval_scores" / "0000000000a2_0000000000e2_step000005_gsm8k.parquet").write_bytes(b"")
    text = write_summary(tmp_path, "s", tmp_path / "summary.md").read_text()
    assert "| gsm8k | grpo | x | 1 |" in text
    assert "Left out, unreadable (1 table files" in text and "`eval_scores/0000000000a2_0000000000e2_step000005_gsm8k.parquet`" in text


# ------------------------------------------------------------------------------------------------- doctor
def test_a_healthy_sweep_is_healthy(sweep):
    res = sweep.doctor()
    assert res.returncode == 0 and "healthy" in res.stderr and res.stdout == "", res.stdout


CRASHING_WRITER = r"""
import os, sys
from workflow.results import writer
def write_then_die(where):  # killed mid-write, before the digest: the temporary stays behind, its process is gone
    os._exit(9)
writer.digest.seal = write_then_die
writer.write_rows(sys.argv[1], "runs", "rl_0123456789ab", [dict(run_id="0123456789ab", sweep="s", stage="rl")])
"""


def test_doctor_finds_each_kind_of_problem(sweep):
    r = sweep.run
    DAMAGE["random bytes"](sweep.table_file("eval_scores"))  # damaged
    crash = subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(sweep.results)], cwd=REPO)
    assert crash.returncode == 9  # a leftover temporary, as a killed write leaves it
    sweep.table_file("train_steps", "rl_").unlink()  # RL's DONE.json, but not all of its steps
    (sweep.base / "sft" / r.sft_id / "DONE.json").unlink()  # a runs row saying completed, no DONE.json
    res = sweep.doctor()
    assert res.returncode == 1, res.stderr
    out = res.stdout
    assert f"damaged: _store/tables/eval_scores/{r.run_id}_{r.eval_id}_step" in out  # (relative to the results)
    assert "temporary: _store/tables/runs/.rl_0123456789ab.parquet.tmp-" in out
    assert f"done-without-rows: _store/rl/{r.run_id}" in out and "train_steps holds 2 of its 4 steps" in out
    assert f"rows-without-done: _store/sft/{r.sft_id}" in out
    assert "4 problem(s)" in res.stderr


def test_a_stage_run_again_removes_what_its_killed_attempt_left_and_doctor_is_clean(sweep):
    """A stage killed mid-write leaves hidden temporaries (a table file's, a checkpoint directory's); running the
    stage again removes its own (it holds the stage's lock: nothing else writes them, whatever their pid), and leaves
    another stage's alone. Before, the rerun completed but doctor reported the temporaries forever."""
    r = sweep.run
    runs = sweep.base / "tables" / "runs"
    mine = [runs / f".rl_{r.run_id}.parquet.tmp-4000001",
            sweep.base / "rl" / r.run_id / "checkpoints" / ".step_000002.tmp-4000002" / "model.safetensors",
            sweep.base / "rl" / r.run_id / ".DONE.json.tmp-4000003"]
    other = runs / f".sft_{r.sft_id}.parquet.tmp-4000004"  # the SFT stage's: not the RL stage's to remove
    for path in (*mine, other):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half a file")
    assert sweep.doctor().stdout.count("temporary:") == 4
    (sweep.base / "rl" / r.run_id / "DONE.json").unlink()
    sweep.rerun("rl")  # resumes at its final checkpoint, rewrites its DONE.json and runs row
    assert not any(p.exists() for p in mine) and not mine[1].parent.exists() and other.exists()
    res = sweep.doctor()
    assert res.stdout.count("temporary:") == 1 and f".sft_{r.sft_id}.parquet.tmp-4000004" in res.stdout
    other.unlink()
    assert sweep.doctor().returncode == 0


def test_a_rescore_whose_verdicts_are_gone_is_found_and_fix_lets_it_run_again(sweep):
    from workflow.eval.rescore import run_rescore
    r = sweep.run
    step, group = r.eval_jobs[-1]
    marker = run_rescore(sweep.results, "s", r.eval_id, r.stage_config("eval"), step, group, "math_equal")
    assert sweep.doctor().returncode == 0  # its rows are there
    sweep.table_file("eval_grades").unlink()
    res = sweep.doctor()
    assert res.returncode == 1
    marker_path = f"_store/eval/{r.run_id}/{r.eval_id}/step_{step}/{group}/rescored/math_equal.json"
    assert f"done-without-rows: {marker_path}" in res.stdout
    assert "eval_grades has no rows for arithmetic" in res.stdout and "--graders math_equal" in res.stdout
    assert sweep.doctor("--fix").returncode == 1 and not marker.exists()  # moved aside, so the rescore runs again
    run_rescore(sweep.results, "s", r.eval_id, r.stage_config("eval"), step, group, "math_equal")
    assert sweep.doctor().returncode == 0


def printed_snakemake(sweep: Sweep, doctor_out: str, *extra: str) -> subprocess.CompletedProcess:
    """Run the `snakemake ...` command doctor printed to recompute its (only) problem, with `extra` (-n)."""
    (line,) = [line for line in doctor_out.splitlines() if "recompute:" in line and "run snakemake " in line]
    command = shlex.split(line[line.index("run snakemake ") + 4:].split(": ")[0])
    return subprocess.run([*SNAKEMAKE, "-d", str(sweep.dir), *extra, *command[1:]], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_removing_a_table_file_reruns_nothing_but_doctor_fix_makes_snakemake_recompute_it(sweep):
    """Snakemake's targets are DONE.json files: a deleted table file alone is never recomputed."""
    r = sweep.run
    samples = sweep.table_file("eval_samples")
    expected = pq.read_table(samples).num_rows
    samples.unlink()
    plan = snakemake(sweep.dir, sweep.file, "-n")
    assert plan.returncode == 0 and "eval" not in planned_jobs(plan.stdout), plan.stdout  # only the summary

    res = sweep.doctor()
    assert res.returncode == 1 and "eval_samples has no rows for arithmetic" in res.stdout
    fixed = sweep.doctor("--fix")
    assert fixed.returncode == 1 and "moved to quarantine:" in fixed.stdout
    assert planned_jobs(snakemake(sweep.dir, sweep.file, "-n").stdout).get("eval") == len(r.eval_jobs)
    assert planned_jobs(printed_snakemake(sweep, res.stdout, "-n").stdout) == {"eval": 1}

    sweep.rerun("eval")
    assert sweep.doctor().returncode == 0
    assert query("SELECT count(*) AS n FROM eval_samples", sweep.results, "s").to_pylist() == [{"n": expected}]


@pytest.mark.slow
def test_a_damaged_train_steps_file_is_recomputed_by_training_again(sweep):
    """A rerun resumes from the last checkpoint: only without its checkpoints does the stage log steps 1.. again.
    And with the stages after it done, Snakemake rebuilds the missing DONE.json only when asked for it."""
    r = sweep.run
    DAMAGE["truncated"](sweep.table_file("train_steps", "sft_"))
    res = sweep.doctor("--fix")
    assert res.returncode == 1 and f"sft {r.sft_id} trains again from scratch" in res.stdout
    assert not (sweep.base / "sft" / r.sft_id / "checkpoints").exists()
    assert "sft" not in planned_jobs(snakemake(sweep.dir, sweep.file, "-n").stdout)  # a plain run: not rebuilt
    assert planned_jobs(printed_snakemake(sweep, res.stdout, "-n").stdout) == {"sft": 1}  # asked for: rebuilt

    sweep.rerun("sft")
    steps = query(f"SELECT count(*) AS n, count(DISTINCT step) AS d FROM train_steps WHERE run_id = '{r.sft_id}'",
                  sweep.results, "s").to_pylist()
    assert steps == [{"n": 20, "d": 20}]  # every step once: none missing, none twice
    plan = planned_jobs(snakemake(sweep.dir, sweep.file, "-n").stdout)
    assert plan.get("rl") == 1 and plan.get("eval") == len(r.eval_jobs)  # then the stages after it (newer input)


def contents(root: Path) -> dict[Path, str]:
    return {p.relative_to(root): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()}


def test_fix_moves_and_never_deletes(sweep):
    for table in ("runs", "train_steps", "eval_scores"):
        DAMAGE["empty"](sweep.table_file(table))
    before = contents(sweep.base)
    res = sweep.doctor("--fix")
    assert res.returncode == 1 and "moved to quarantine:" in res.stdout
    after = contents(sweep.base)
    (moved_to,) = (sweep.base / "quarantine").iterdir()
    quarantined = {path: h for path, h in before.items() if after.get(path) != h}
    assert quarantined, "nothing was moved"
    for path, h in before.items():  # every file is where it was, or under quarantine/<time>/ with the same bytes
        assert after.get(path) == h or after.get(moved_to.relative_to(sweep.base) / path) == h, path
    assert "damaged:" not in sweep.doctor().stdout


def test_fix_leaves_a_running_stage_alone(sweep):
    r = sweep.run
    bad = sweep.table_file("eval_scores")
    DAMAGE["empty"](bad)
    job_dir = next((sweep.base / "eval" / r.run_id / r.eval_id).glob("step_*/*"))
    with run_lock(job_dir, "a test holding the eval job"):
        res = sweep.doctor("--fix")
    assert res.returncode == 1 and "--fix leaves it alone" in res.stdout
    assert bad.exists() and (job_dir / "DONE.json").exists()


def test_doctor_needs_a_sweep_that_has_results(sweep):
    for args in ((), ("--sweep", "nope")):
        res = sweep.cli("doctor", *args)
        assert res.returncode == 2 and res.stderr.startswith("error:") and "Traceback" not in res.stderr
