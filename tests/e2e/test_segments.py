"""An RL run trained as a chain of segment jobs (workflow/segments.py): where segments end, that the chain trains what
one job trains, that each evaluation waits only for its own segment, that other graders judge the evaluations' stored
responses without generating (`rlsweep rescore`), and that runs finished in one job before segments existed are
neither trained nor evaluated again."""

from __future__ import annotations

import json
import math
import os
import shlex
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import SFT_FOR_RL, kill_and_resume_rl, mtimes, planned_jobs, run_cli, snakemake, write_sweep
from workflow.config import RunConfig
from workflow.launch import run_stage
from workflow.layout import done_path, segment_done, step_dir
from workflow.results.catalog import query
from workflow.segments import segment_ends
from workflow.stages import stage_config
from workflow.sweep.expand import load_sweep
from workflow.identity import stable_id


def cfg(**rl_eval) -> RunConfig:
    rl = {"steps": 60, "checkpoint_every": 10, **rl_eval.get("rl", {})}
    return RunConfig.model_validate({"rl": rl, "eval": rl_eval.get("eval", {})})


def test_segments_end_at_the_evaluation_interval_by_default_and_at_every_evaluated_step():
    assert segment_ends(cfg(eval={"every": 20})) == [20, 40, 60]
    assert segment_ends(cfg()) == [60]  # no intermediate evaluation: one job, as before segments
    assert segment_ends(cfg(rl={"segment_steps": 25}, eval={"every": 20})) == [20, 25, 40, 50, 60]
    assert segment_ends(cfg(rl={"segment_steps": 30})) == [30, 60]
    assert segment_ends(cfg(rl={"segment_steps": 0}, eval={"every": 20})) == [60]  # 0: one job
    assert segment_ends(cfg(rl={"segment_steps": 100}, eval={"every": 20})) == [20, 40, 60]
    verl = RunConfig.model_validate({"engine": {"name": "verl", "verl": {"model_path": "rlsweep:tiny"}},
                                     "rl": {"steps": 60, "checkpoint_every": 10}, "eval": {"every": 20}})
    assert segment_ends(verl) == [20, 40, 60]  # verl too, since its rollouts are seeded per request (issue 61)
    asked = RunConfig.model_validate({**verl.model_dump(), "rl": {**verl.rl.model_dump(), "segment_steps": 25}})
    assert segment_ends(asked) == [20, 25, 40, 50, 60]
    one = RunConfig.model_validate({**verl.model_dump(), "rl": {**verl.rl.model_dump(), "segment_steps": 0}})
    assert segment_ends(one) == [60]


def test_how_a_run_is_split_into_jobs_is_not_part_of_its_id():
    ids = {stable_id(stage_config(cfg(rl={"segment_steps": s}, eval={"every": 20}), "rl")) for s in (None, 0, 5, 30)}
    assert len(ids) == 1


# ------------------------------------------------------------------------------------------------ one job vs chain
RL = {"steps": 9, "prompts_per_step": 8, "group_size": 8, "checkpoint_every": 3, "max_new_tokens": 20,
      "warmup_steps": 4, "update": "gxpo", "gxpo": {"K": 3, "window": 2, "warmup": 2}}
TIMING = {"wall_s", "gen_s", "update_s"}  # seconds, which differ run to run


def _comparable(rows: list[dict]) -> list[dict]:
    """train_steps rows without their timing, NaN as None (NaN != NaN)."""
    return [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items() if k not in TIMING}
            for r in rows]


def _weights(done: Path) -> dict[str, torch.Tensor]:
    d = json.loads(done.read_text())
    return load_file(done.parent / d["checkpoint"] / "model.safetensors")


@pytest.mark.slow
def test_a_chain_of_segments_trains_what_one_job_trains(sft_for_rl, tmp_path):
    """GXPO (its gate's window and warm-up carry over segments), a learning-rate warm-up that spans the first
    boundary, segments ending off the checkpoint interval, the middle segment SIGKILLed after a checkpoint and
    started again: the chain's final weights and train_steps rows (timing aside) are the single job's, bit for bit,
    every step once; the run has one runs row, completed, started when its first segment did."""
    sft_id = json.loads(sft_for_rl.read_text())["id"]
    rcfg = stage_config(RunConfig.model_validate({**SFT_FOR_RL, "rl": RL}), "rl", sft_id=sft_id)
    run_id = stable_id(rcfg)
    one = run_stage("rl", "seg", run_id, rcfg, results_root=tmp_path / "one", init=sft_for_rl)

    chain = tmp_path / "chain"
    first = run_stage("rl", "seg", run_id, rcfg, results_root=chain, init=sft_for_rl, until=2)
    assert first == segment_done(chain, "rl", run_id, 2) and not done_path(chain, "rl", run_id).exists()
    assert json.loads(first.read_text())["step"] == 2
    started = query("SELECT status, started_at FROM runs WHERE stage = 'rl'", chain).to_pylist()
    assert [r["status"] for r in started] == ["paused"]
    second = kill_and_resume_rl("seg", run_id, rcfg, sft_for_rl, chain, RL["steps"], kill_at=6, until=8, after=first)
    assert json.loads(second.read_text())["step"] == 8
    last = run_stage("rl", "seg", run_id, rcfg, results_root=chain, init=sft_for_rl, until=9, after=second)
    assert last == done_path(chain, "rl", run_id) and segment_done(chain, "rl", run_id, 9).is_file()

    ref, got = _weights(done_path(tmp_path / "one", "rl", run_id)), _weights(last)
    assert ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref)
    sql = "SELECT * FROM train_steps WHERE stage = 'rl' ORDER BY step"
    single, chained = _comparable(query(sql, tmp_path / "one").to_pylist()), _comparable(query(sql, chain).to_pylist())
    assert [r["step"] for r in chained] == list(range(1, RL["steps"] + 1))  # every step exactly once
    assert chained == single
    assert any(r["reward"] > 0 for r in chained)  # it learned something, so equal weights say something
    init = load_file(sft_for_rl.parent / json.loads(sft_for_rl.read_text())["checkpoint"] / "model.safetensors")
    assert any(not torch.equal(got[k], init[k]) for k in got)
    rows = query("SELECT status, started_at, wall_s FROM runs WHERE stage = 'rl'", chain).to_pylist()
    assert len(rows) == 1 and rows[0]["status"] == "completed"
    assert rows[0]["started_at"] == started[0]["started_at"]  # the run's row spans its segments
    assert one.is_file()


def test_a_segment_refuses_an_end_outside_the_run(tmp_path):
    rcfg = stage_config(RunConfig.model_validate({"sft": {"enabled": False}, "rl": {"steps": 4}}), "rl")
    with pytest.raises(ValueError, match="--until 5: a segment of this run ends between step 1 and rl.steps"):
        run_stage("rl", "s", stable_id(rcfg), rcfg, results_root=tmp_path, until=5)


# ------------------------------------------------------------------------------------------------------ the DAG
def _chain_base() -> str:
    """The tests' tiny sweep base, 6 RL steps evaluated every 2: three segments."""
    from helpers import TINY_BASE
    return TINY_BASE.replace("rl: {steps: 4,", "rl: {steps: 6,").replace("eval: {k: 2,", "eval: {every: 2, k: 2,")


def _jobs(out: str) -> list[list[str]]:
    """The stage jobs' command lines of a `snakemake -n -p`."""
    return [shlex.split(line.split("Shell command: ", 1)[-1]) for line in out.splitlines()
            if "scripts/stage.py" in line]


def _option(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.slow
def test_each_evaluation_waits_for_the_segment_that_ends_at_its_step(tmp_path):
    sweep = write_sweep(tmp_path / "chain.yaml", "chain", base=_chain_base())
    out = snakemake(tmp_path, sweep, "-n", "-p")
    assert out.returncode == 0, out.stderr[-2000:]
    assert planned_jobs(out.stdout)["rl"] == 3
    jobs = _jobs(out.stdout)
    rl = {int(_option(j, "--until")): j for j in jobs if j[2] == "rl"}
    assert sorted(rl) == [2, 4, 6]
    assert _option(rl[2], "--after") is None
    assert _option(rl[4], "--after").endswith("/DONE_2.json") and _option(rl[6], "--after").endswith("/DONE_4.json")
    # every segment names the SFT checkpoint it starts from, though only the first waits for it (the rest wait for
    # the segment before): one job's identity, however many segments it is cut into
    [sft] = {_option(j, "--init") for j in rl.values()}
    assert sft is not None and Path(sft).name == "DONE.json" and "/sft/" in sft
    evals = {int(_option(j, "--step")): _option(j, "--checkpoint-from") for j in jobs if j[2] == "eval"}
    assert {s: Path(p).name for s, p in evals.items() if s} == {2: "DONE_2.json", 4: "DONE_4.json", 6: "DONE_6.json"}

    # rl.segment_steps 0: one job for the whole run, and every evaluation waits for it (its checkpoints hold them all)
    whole = write_sweep(tmp_path / "whole.yaml", "whole", base=_chain_base().replace("rl: {", "rl: {segment_steps: 0, "))
    out = snakemake(tmp_path, whole, "-n", "-p")
    assert out.returncode == 0, out.stderr[-2000:]
    jobs = _jobs(out.stdout)
    [rl] = [j for j in jobs if j[2] == "rl"]
    assert _option(rl, "--until") == "6" and _option(rl, "--after") is None
    evals = {int(_option(j, "--step")): _option(j, "--checkpoint-from") for j in jobs if j[2] == "eval"}
    assert {s: Path(p).name for s, p in evals.items() if s} == {2: "DONE_6.json", 4: "DONE_6.json", 6: "DONE_6.json"}


@pytest.mark.slow
def test_each_step0_copy_reads_the_evaluation_of_its_own_start(tmp_path):
    """eval.at_start: a run's step-0 job copies the evaluation of the first run that starts from the same SFT
    checkpoint. With one SFT job every copy reads the one start (a plain input pattern: rules/eval.smk); with two,
    each copy reads its own checkpoint's (an input function), never the other's."""
    at_start = _chain_base().replace("eval: {every: 2,", "eval: {at_start: true, every: 2,")
    for name, body, starts in (("one", "seeds: [0, 1, 2]\n", 1),
                               ("two", "grid:\n  sft.lr: [1.0e-3, 2.0e-3]\nseeds: [0, 1]\n", 2)):
        sweep = write_sweep(tmp_path / f"{name}.yaml", name, body, base=at_start)
        out = snakemake(tmp_path, sweep, "-n", "-p")
        assert out.returncode == 0, out.stderr[-2000:]
        step0 = [j for j in _jobs(out.stdout) if j[2] == "eval" and _option(j, "--step") == "0"]
        own = {_option(j, "--id"): j for j in step0 if "--copy-from" not in j}
        copies = [j for j in step0 if "--copy-from" in j]
        assert len(own) == starts and len(copies) == len(load_sweep(sweep).runs) - starts
        runs = {r.eval_id: r for r in load_sweep(sweep).runs}
        for copy in copies:
            source = _option(copy, "--copy-from")
            start = next(runs[i] for i in own if f"/{i}/" in source)  # the start whose file it reads
            assert start.sft_id == runs[_option(copy, "--id")].sft_id and source.endswith("/DONE.json")


@pytest.mark.slow
def test_a_sweep_of_segments_evaluates_while_training_and_a_run_finished_in_one_job_is_not_redone(tmp_path):
    """Run by Snakemake on 2 cores: the evaluation of step 2 starts before the last segment ends (it waits for its
    segment only). Then the same run as if it had finished before segments (its segment files gone, its DONE.json
    and evaluations there): a dry run says so, a run records its segments dated like their checkpoints and trains and
    evaluates nothing."""
    sweep = write_sweep(tmp_path / "chain.yaml", "chain", base=_chain_base())
    done = snakemake(tmp_path, sweep)
    assert done.returncode == 0, done.stderr[-3000:]
    results = tmp_path / "results"
    rows = query("SELECT stage, status, started_at, finished_at, eval_step FROM runs", results,
                 sweep="chain").to_pylist()
    [rl] = [r for r in rows if r["stage"] == "rl"]
    eval2 = next(r for r in rows if r["stage"] == "eval" and r["eval_step"] == 2)
    assert rl["status"] == "completed" and eval2["started_at"] < rl["finished_at"]
    scores = query("SELECT DISTINCT step, benchmark FROM eval_scores ORDER BY step", results).to_pylist()
    assert scores == [{"step": s, "benchmark": "arithmetic"} for s in (2, 4, 6)]
    assert sorted((r["eval_step"], r["status"]) for r in rows if r["stage"] == "eval") == \
        [(2, "completed"), (4, "completed"), (6, "completed")]
    _other_graders_judge_the_stored_responses_without_generating(tmp_path, sweep, results)

    run_dir = done_path(results, "rl", "x").parent.parent
    [run] = [p for p in run_dir.iterdir() if p.is_dir()]
    for p in run.glob("DONE_*.json"):
        p.unlink()
    stamp = (run / "DONE.json").stat().st_mtime_ns
    dry = snakemake(tmp_path, sweep, "-n")
    assert "1 RL run(s) finished before runs were trained in segments" in dry.stderr
    again = snakemake(tmp_path, sweep)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, again.stderr[-2000:]
    assert sorted(p.name for p in run.glob("DONE_*.json")) == ["DONE_2.json", "DONE_4.json", "DONE_6.json"]
    for p in run.glob("DONE_*.json"):  # as old as the weights they stand for
        assert p.stat().st_mtime_ns == (step_dir(run / "checkpoints", int(p.stem[5:])) / "meta.json").stat().st_mtime_ns
    assert os.path.getmtime(run / "DONE.json") * 1e9 == pytest.approx(stamp, abs=1e3)


def _other_graders_judge_the_stored_responses_without_generating(workdir: Path, sweep: Path, results: Path) -> None:
    """`rlsweep rescore` on the sweep's three evaluations (steps 2, 4, 6; 16 problems x 2 samples each): every stored
    response judged once by each grader asked for, nothing generated again, the report's graders section; a second
    rescore does nothing, and a sweep file that lists a grader plans its rescore jobs only.
    (tests/unit/eval/test_graders.py pins the graders' verdicts.)"""
    evaluated = {k: v for k, v in mtimes(results).items()  # the samples, and the eval jobs' ends
                 if "eval_samples" in k or ("/eval/" in k and k.endswith("DONE.json"))}
    assert len([k for k in evaluated if k.endswith("DONE.json")]) == 3
    bad = run_cli("--results", str(results), "rescore", str(sweep), "--graders", "nope")
    assert bad.returncode == 2 and "unknown grader(s) nope; known: dapo, exact, math_equal, math_verify" in bad.stderr
    first = run_cli("--results", str(results), "rescore", str(sweep), "--graders", "math_verify", "dapo")
    assert first.returncode == 0, first.stderr[-3000:]
    counts = query("SELECT g.grader, count(*) AS n, count(s.response) AS matched FROM eval_grades g "
                   "JOIN eval_samples s USING (run_id, eval_id, step, benchmark, problem_id, sample_idx) "
                   "GROUP BY ALL ORDER BY ALL", results).to_pylist()
    assert counts == [{"grader": "dapo", "n": 96, "matched": 96}, {"grader": "math_verify", "n": 96, "matched": 96}]
    assert query("SELECT count(*) AS n FROM runs WHERE stage = 'eval'", results).to_pylist() == [{"n": 3}]
    assert {k: v for k, v in mtimes(results).items() if k in evaluated} == evaluated
    assert query("SELECT DISTINCT grader FROM eval_samples", results).to_pylist() == [{"grader": "exact"}]
    report = (results / sweep.stem / "report" / "report.md").read_text()
    assert "## Graders" in report and "math_verify" in report and "dapo" in report
    again = run_cli("--results", str(results), "rescore", str(sweep), "--graders", "math_verify", "dapo")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    # the sweep listing a grader (the same sweep, its file beside): snakemake plans its rescore jobs only (the ids
    # are the same, nothing else reruns); a dry run, so the test's sweep file goes on without it
    listed = workdir / "graders.yaml"
    listed.write_text(sweep.read_text().replace("max_new_tokens: 16}", "max_new_tokens: 16, graders: [math_equal]}"))
    assert "graders: [math_equal]" in listed.read_text()
    plan = snakemake(workdir, listed, "-n")
    assert planned_jobs(plan.stdout) == {"rescore": 3, "aggregate": 1, "report": 1, "all": 1}, \
        plan.stdout[-2000:] + plan.stderr[-2000:]


def test_status_shows_a_run_between_segments_beside_its_evaluations_done_so_far(tmp_path):
    """`rlsweep status` while a run trains in segments: the RL column says where the run stands and that its next
    segment is pending, the eval column how many of its evaluations are done, with the score of the latest."""
    base = _chain_base().replace("  sft: {steps: 20, batch_size: 32, checkpoint_every: 10}",
                                 "  sft: {enabled: false}")
    sweep = write_sweep(tmp_path / "st.yaml", "st", base=base)
    [run] = load_sweep(sweep).runs
    root = tmp_path / "results"
    first = run_stage("rl", "st", run.run_id, run.stage_config("rl"), results_root=root, until=2, label=run.label)
    run_stage("eval", "st", run.eval_id, run.stage_config("eval"), results_root=root, checkpoint_from=first, step=2,
              group="arithmetic", label=run.label)
    out = run_cli("--results", str(root), "status", str(sweep), env={"COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    assert "step 2/6, next segment pending" in out.stdout and "1/3 jobs" in out.stdout, out.stdout
