"""Extending a finished RL run without training it again (workflow/extend.py): which runs may take a finished
shorter run's first segments and why others train from step 0, that every method that does not say it reads
rl.steps trains the same first steps whatever rl.steps is, and a sweep taken from 4 to 8 steps training only 5-8
into the weights an 8-step run trains from scratch."""

from __future__ import annotations

import json
import math
import re
import shutil

import pytest
import torch
from safetensors.torch import load_file

from helpers import cli, planned_jobs, snakemake, write_sweep
from workflow.atomic import write_json
from workflow.config import RunConfig
from workflow.extend import (extend, extensions, index_finished, record_trajectory, trajectory_key,
                             trains_from_step_0)
from workflow.launch import run_stage
from workflow.layout import CHECKPOINTS, done_path, segment_done, stage_dir, step_dir, train_steps_file
from workflow.methods.registry import in_order
from workflow.results.catalog import query
from workflow.results.compaction import compact
from workflow.results.writer import write_rows
from workflow.stages import stage_config
from workflow.sweep.expand import load_sweep
from workflow.identity import stable_id

TINY = {"sft": {"enabled": False}, "model": {"n_layers": 1, "hidden": 32, "n_heads": 2},
        "task": {"n_heldout": 16}}
TIMING = {"wall_s", "gen_s", "update_s"}  # seconds, which differ run to run


def _rows(root, run_id: str) -> list[dict]:
    """A run's train_steps rows by step, without timing or its id, NaN as None (NaN != NaN)."""
    rows = query(f"SELECT * FROM train_steps WHERE run_id = '{run_id}' ORDER BY step", root).to_pylist()
    return [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()
             if k not in TIMING | {"run_id", "sweep"}} for r in rows]


def _weights(done) -> dict[str, torch.Tensor]:
    return load_file(done.parent / json.loads(done.read_text())["checkpoint"] / "model.safetensors")


def _sweep_runs(tmp_path, name: str, rl: str, eval_: str = "{every: 2, k: 2, max_new_tokens: 16}", extra: str = ""):
    base = ("base:\n  sft: {enabled: false}\n  model: {n_layers: 1, hidden: 32, n_heads: 2}\n  task: {n_heldout: 16}\n"
            f"  rl: {rl}\n  eval: {eval_}\n{extra}")
    return write_sweep(tmp_path / f"{name}.yaml", name, base=base)


def _fake_finished(root, run, steps_with_checkpoints) -> None:
    """A finished run in the store as the launcher leaves one (DONE.json, checkpoints, config, index entry)."""
    d = stage_dir(root, "rl", run.run_id)
    for s in steps_with_checkpoints:
        write_json(step_dir(d / CHECKPOINTS, s) / "meta.json", {"step": s})
    write_json(d / "config.json", run.stage_config("rl"))
    write_json(done_path(root, "rl", run.run_id), {"stage": "rl", "id": run.run_id, "step": run.config.rl.steps})
    record_trajectory(root, run.stage_config("rl"), run.run_id)


def test_a_run_of_a_finished_runs_settings_but_rl_steps_takes_its_segments_where_it_can(tmp_path):
    root = tmp_path / "results"
    rl = "{steps: 4, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, checkpoint_every: 2}"
    [short] = load_sweep(_sweep_runs(tmp_path, "short", rl)).runs
    [long_] = load_sweep(_sweep_runs(tmp_path, "long", rl.replace("steps: 4,", "steps: 8,"))).runs
    assert trajectory_key(short.stage_config("rl")) == trajectory_key(long_.stage_config("rl"))
    assert short.run_id != long_.run_id
    assert extensions(root, [long_]) == ([], [])  # no index yet: nothing to take

    _fake_finished(root, short, [2, 4])
    [ext], cannot = extensions(root, [long_])
    assert (ext.donor, ext.ends, cannot) == (short.run_id, (2, 4), [])
    # a segment ending where the donor holds no checkpoint (segments of 3 steps, the donor's of 2): it takes the
    # segments before the first such end only
    [other] = load_sweep(_sweep_runs(tmp_path, "o", rl.replace("steps: 4,", "steps: 8, segment_steps: 3,"))).runs
    assert other.run_id == long_.run_id and other.segment_ends == [2, 3, 4, 6, 8]
    assert [e.ends for e in extensions(root, [other])[0]] == [(2,)]
    # settings that differ in more than rl.steps: no donor
    [lr] = load_sweep(_sweep_runs(tmp_path, "lr", rl.replace("steps: 4,", "steps: 8, lr: 0.001,"))).runs
    assert extensions(root, [lr]) == ([], [])
    # the donor removed since (rlsweep gc): its index entry is skipped
    done_path(root, "rl", short.run_id).unlink()
    assert extensions(root, [long_]) == ([], [])


def _donor_with_rows(tmp_path, steps_written):
    """A finished 4-step donor (checkpoints at 2 and 4) whose train_steps files hold `steps_written` (lists of steps,
    one file each, as the engine flushes them per checkpoint interval), and the 8-step run that extends it."""
    root = tmp_path / "results"
    rl = "{steps: 4, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, checkpoint_every: 2}"
    [short] = load_sweep(_sweep_runs(tmp_path, "short", rl)).runs
    [long_] = load_sweep(_sweep_runs(tmp_path, "long", rl.replace("steps: 4,", "steps: 8,"))).runs
    _fake_finished(root, short, [2, 4])
    for steps in steps_written:
        write_rows(root, "train_steps", train_steps_file("rl", short.run_id, steps[0], steps[-1]),
                   [{"run_id": short.run_id, "sweep": "short", "stage": "rl", "step": s, "loss": s / 10,
                     "reward": s / 100} for s in steps])
    [ext], _ = extensions(root, [long_])
    return root, short, long_, ext


def _steps(root, run_id):
    return query(f"SELECT step, loss, reward FROM train_steps WHERE run_id = '{run_id}' ORDER BY step",
                 root).to_pylist()


@pytest.mark.parametrize("compacted", [False, True], ids=["own-files", "packed"])
def test_an_extension_copies_every_step_of_its_donor_wherever_compaction_left_the_rows(tmp_path, compacted):
    """Issue 57: after `rlsweep compact` the donor's train_steps sit in a pack; the extended run still gets steps
    1-4, each once and equal to the donor's, and its segments ending at 2 and 4 are marked done."""
    root, short, long_, ext = _donor_with_rows(tmp_path, [[1, 2], [3, 4]])
    if compacted:
        compact(root)
        assert not list((root / "_store" / "tables" / "train_steps").glob(f"rl_{short.run_id}_*"))  # packed
    assert extend(root, "long", ext) is None
    assert _steps(root, long_.run_id) == _steps(root, short.run_id) == \
        [{"step": s, "loss": s / 10, "reward": s / 100} for s in (1, 2, 3, 4)]
    assert all(segment_done(root, "rl", long_.run_id, end).is_file() for end in (2, 4))
    assert query(f"SELECT DISTINCT sweep FROM train_steps WHERE run_id = '{long_.run_id}'", root).to_pylist() == \
        [{"sweep": "long"}]


@pytest.mark.parametrize("written,why", [([[1, 2]], "lacks step(s) 3-4"), ([[1], [3, 4]], "lacks step(s) 2"),
                                         ([[1, 2], [2, 3, 4]], "holds step(s) 2 more than once")])
def test_a_donor_whose_steps_are_not_each_there_once_is_refused_and_nothing_is_taken(tmp_path, written, why):
    """The run then trains from step 0: no checkpoint linked (it would resume there without the earlier rows), no
    rows copied, no segment marked done."""
    root, short, long_, ext = _donor_with_rows(tmp_path, written)
    compact(root)  # (packed or not: the same check)
    refused = extend(root, "long", ext)
    assert refused == (f"the finished run {short.run_id}'s train_steps {why} of 1-4, so its steps cannot be taken "
                       "(`rlsweep doctor` examines it); this run trains from step 0")
    run_dir = stage_dir(root, "rl", long_.run_id)
    assert not (run_dir / CHECKPOINTS).exists() and not list(run_dir.glob("DONE*.json"))
    assert _steps(root, long_.run_id) == []


def test_runs_finished_before_the_index_existed_are_indexed_once(tmp_path):
    root = tmp_path / "results"
    rl = "{steps: 4, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, checkpoint_every: 2}"
    [short] = load_sweep(_sweep_runs(tmp_path, "short", rl)).runs
    [long_] = load_sweep(_sweep_runs(tmp_path, "long", rl.replace("steps: 4,", "steps: 8,"))).runs
    _fake_finished(root, short, [2, 4])
    shutil.rmtree(root / "_store" / "trajectories")  # finished before the index existed
    assert extensions(root, [long_]) == ([], [])
    assert index_finished(root) == 1 and [e.donor for e in extensions(root, [long_])[0]] == [short.run_id]
    assert index_finished(root) == 0  # once per store


def test_a_run_whose_steps_read_rl_steps_trains_from_step_0_and_says_why(tmp_path):
    root = tmp_path / "results"
    rl = ("{steps: 4, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, checkpoint_every: 2, "
          "slow2fast: {enabled: true}}")
    [short] = load_sweep(_sweep_runs(tmp_path, "short", rl)).runs
    [long_] = load_sweep(_sweep_runs(tmp_path, "long", rl.replace("steps: 4,", "steps: 8,"))).runs
    _fake_finished(root, short, [2, 4])
    assert extensions(root, [long_]) == ([], [(long_, short.run_id, "Slow2Fast's phases depend on rl.steps")])
    assert trains_from_step_0(RunConfig.model_validate({"rl": {"mix": "prefix_rft"}})) == \
        "Prefix-RFT's prefix schedule decays over rl.steps"
    assert trains_from_step_0(RunConfig.model_validate({"rl": {"update": "gxpo"}})) is None

    out = cli("--results", str(root), "plan", str(_sweep_runs(tmp_path, "long", rl.replace("steps: 4,",
                                                                                                  "steps: 8,"))))
    assert out.returncode == 0, out.stderr
    assert f"trains from step 0, though the finished run {short.run_id} has the same settings but rl.steps: " \
           "Slow2Fast's phases depend on rl.steps" in " ".join(out.stderr.split())


VERL_BASE = """base:
  engine: {name: verl, verl: {model_path: "rlsweep:tiny", device: cpu, max_prompt_length: 192%s}}
  task: {name: datasets, datasets: [{name: gsm8k_train, path: sweeps/data/tiny_gsm8k_train.jsonl}], template: boxed}
  sft: {enabled: false}
  rl: {steps: %d, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, checkpoint_every: 1, segment_steps: 2}
  eval: {benchmarks: [gsm8k], paths: {gsm8k: tests/fixtures/benchmarks/gsm8k.jsonl}, k: 2, backend: vllm}
"""


def _verl_run(tmp_path, name: str, steps: int, overrides: str = ""):
    [run] = load_sweep(write_sweep(tmp_path / f"{name}.yaml", name, base=VERL_BASE % (overrides, steps))).runs
    return run


def test_a_verl_run_takes_its_donors_verl_checkpoint_linked_and_resumes_from_the_last_step_taken(tmp_path):
    """Issue 61: the verl side of an extension, up to verl itself (tests/long/test_verl_extend.py runs verl): the
    donor's `verl/global_step_N` (shards, optimizer, dataloader position, the method's state) is hard-linked, never
    copied, beside the exported checkpoint, and verl's tracker file names the last step taken, not the donor's last.
    A segment end where the donor kept no verl checkpoint is not taken."""
    root = tmp_path / "results"
    short, long_ = _verl_run(tmp_path, "short", 3), _verl_run(tmp_path, "long", 6)
    assert (short.segment_ends, long_.segment_ends) == ([2, 3], [2, 4, 6])
    _fake_finished(root, short, [1, 2, 3])
    src = stage_dir(root, "rl", short.run_id) / "verl"
    for step in (1, 3):  # verl's checkpoints of steps 1 and 3; step 2's comes below
        write_json(src / f"global_step_{step}" / "actor" / "extra_state.json", {"step": step})
    (src / "latest_checkpointed_iteration.txt").write_text("3")
    assert extensions(root, [long_]) == ([], [])  # the exported weights alone: verl would start from step 0

    write_json(src / "global_step_2" / "actor" / "extra_state.json", {"step": 2})
    (src / "global_step_2" / "data.pt").write_bytes(b"dataloader")
    [ext], cannot = extensions(root, [long_])
    assert (ext.donor, ext.ends, cannot) == (short.run_id, (2,), [])  # the donor ends at 3, the run's segment at 4
    write_rows(root, "train_steps", train_steps_file("rl", short.run_id, 1, 3),
               [{"run_id": short.run_id, "sweep": "short", "stage": "rl", "step": s, "loss": s / 10} for s in (1, 2, 3)])
    assert extend(root, "long", ext) is None

    dst = stage_dir(root, "rl", long_.run_id)
    for name in ("actor/extra_state.json", "data.pt"):
        mine, theirs = dst / "verl" / "global_step_2" / name, src / "global_step_2" / name
        assert mine.read_bytes() == theirs.read_bytes() and mine.stat().st_ino == theirs.stat().st_ino
    assert not (dst / "verl" / "global_step_1").exists() and not (dst / "verl" / "global_step_3").exists()
    assert (dst / "verl" / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert (src / "latest_checkpointed_iteration.txt").read_text() == "3"  # the donor's as it was
    assert [r["step"] for r in _steps(root, long_.run_id)] == [1, 2]
    assert json.loads(segment_done(root, "rl", long_.run_id, 2).read_text())["extended_from"] == short.run_id


@pytest.mark.parametrize("overrides,why", [
    ("", None),
    (", overrides: {actor_rollout_ref.actor.optim.lr_scheduler_type: cosine}", "lr_scheduler_type cosine"),
    (", overrides: {actor_rollout_ref.actor.optim.lr_warmup_steps_ratio: 0.1}", "lr_warmup_steps_ratio 0.1"),
    (", overrides: {actor_rollout_ref.actor.optim.lr_warmup_steps_ratio: 0.1, "
     "actor_rollout_ref.actor.optim.lr_warmup_steps: 2}", None),
], ids=["constant", "cosine", "warmup-ratio", "warmup-steps-win"])
def test_a_verl_run_whose_schedule_reads_rl_steps_trains_from_step_0_and_says_why(tmp_path, overrides, why):
    """verl computes a cosine decay, and a warm-up given as a ratio, from the run's total steps: the first steps of a
    longer run are not a shorter one's."""
    found = trains_from_step_0(_verl_run(tmp_path, "v", 4, overrides).config)
    assert found is None if why is None else why in found


# settings under which a method that reads rl.steps shows it within 2 steps of an untrained model (whose groups all
# score 0): Slow2Fast keeping every group in its slow phase and none in its fast one
SHOWS_TOTAL_STEPS = {"slow2fast": {"slow": [0.0, 1.0], "fast": [0.5, 1.0], "refill": "shrink"}}


def _method_settings(name: str, role: str) -> dict:
    own = {name: SHOWS_TOTAL_STEPS[name]} if name in SHOWS_TOTAL_STEPS else {}
    return {"update": {"update": name, **own}, "mix": {"mix": name, **own},
            "part": {name: {"enabled": True, **SHOWS_TOTAL_STEPS.get(name, {})}}}[role]


@pytest.mark.slow
@pytest.mark.parametrize("name,card", [pytest.param(n, c, id=n) for n, c in in_order()])
def test_a_methods_first_steps_depend_on_rl_steps_exactly_when_its_card_says_so(name, card, tmp_path):
    """What lets a longer run take a shorter one's steps: a method's first 2 steps (train_steps rows and weights) are
    the same in a 2-step run and in the first segment of a 4-step run, unless its card says a step reads rl.steps
    (Method.reads_total_steps), and then they differ. A method that read the progress step / rl.steps without
    saying so fails here, and so does a card whose claim is no longer true."""
    rl = {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 16, "checkpoint_every": 2,
          **_method_settings(name, card.role)}
    done = {}
    for steps in (2, 4):
        rcfg = stage_config(RunConfig.model_validate({**TINY, "rl": {**rl, "steps": steps}}), "rl")
        root = tmp_path / str(steps)
        done[steps] = (root, stable_id(rcfg),
                       run_stage("rl", "m", stable_id(rcfg), rcfg, results_root=root, until=2))
    (r2, id2, d2), (r4, id4, d4) = done[2], done[4]
    assert d4 == segment_done(r4, "rl", id4, 2) and len(_rows(r2, id2)) == 2
    w2, w4 = _weights(d2), _weights(d4)
    same = _rows(r2, id2) == _rows(r4, id4) and all(torch.equal(w2[k], w4[k]) for k in w2)
    assert same is not bool(card.reads_total_steps), card.reads_total_steps or "its card says no step reads rl.steps"


# every command that reads rows, as a user runs it: (argv after the sweep file or SQL, what of its output to compare)
READERS = {
    "query": lambda sweep: ["query", "SELECT * EXCLUDE (computed_by) FROM runs ORDER BY ALL", "--format", "csv"],
    "query train_steps": lambda sweep: ["query", "SELECT * FROM train_steps ORDER BY ALL", "--format", "csv"],
    "query eval": lambda sweep: ["query", "SELECT * FROM eval_scores ORDER BY ALL", "--format", "csv"],
    "status": lambda sweep: ["status", str(sweep)],
    "gain": lambda sweep: ["gain", str(sweep)],
    "plan": lambda sweep: ["plan", str(sweep)],
    "doctor": lambda sweep: ["doctor", str(sweep)],
    "report": lambda sweep: ["report", str(sweep)],
    "rescore": lambda sweep: ["rescore", str(sweep), "--graders", "dapo"],
}


def _answers(workdir, sweep, capfd, monkeypatch) -> dict[str, tuple]:
    """Each reading command's exit code and output in `workdir` (results under workdir/results, named relatively,
    so two copies answer alike), the report's Markdown less its time stamp, and the rows rescoring wrote. The
    commands run as `rlsweep` runs them, through its main(), in this process (what they print captured at the file
    descriptors, rescore's Snakemake included): 18 interpreter starts cost this test ~1 min of CI (issue 58)."""
    from workflow.cli import main
    monkeypatch.chdir(workdir)
    out = {}
    for name, argv in READERS.items():
        capfd.readouterr()
        code = main(["--results", "results", *argv(sweep)])
        stdout, stderr = capfd.readouterr()
        # (doctor counts the files it read: packs are fewer; the rows behind them are what must not change)
        text = [re.sub(r"\d+ table files", "N table files", line) for line in (stdout + stderr).splitlines()]
        if name == "rescore":  # its table and summary (not Snakemake's log of the jobs, with their times)
            text = [line for line in text if "│" in line or line.startswith("rescore:")]
        out[name] = (code, text)
    report = (workdir / "results" / "ext" / "report" / "report.md").read_text()
    out["report.md"] = [line for line in report.splitlines() if "UTC" not in line]
    out["eval_grades"] = query("SELECT * EXCLUDE (sweep) FROM eval_grades ORDER BY ALL", workdir / "results").to_pylist()
    return out


@pytest.mark.slow
def test_a_finished_run_reads_the_same_after_compaction_and_extends_from_its_packed_rows(tmp_path, capfd,
                                                                                           monkeypatch):
    """Issue 57. A 4-step run finished through Snakemake; every command that reads rows answers the same on a copy
    whose tables `rlsweep compact` packed; then, on the compacted copy, the sweep taken to 8 steps: a dry run says it
    extends, a run takes steps 1-4 (checkpoints, train_steps rows from the pack, the evaluations of steps 2 and 4)
    and trains 5-8 only (the job log resumes at step 4), and the weights and rows are those of an 8-step run
    trained from scratch."""
    rl = "{steps: 4, prompts_per_step: 4, group_size: 4, max_new_tokens: 16, checkpoint_every: 2}"
    tracking = "tracking: {tensorboard: {}}\n"  # (issue 60: an extension is a tracker run of its own, below)
    short = _sweep_runs(tmp_path, "ext", rl, extra=tracking)
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    first = snakemake(plain, short)
    assert first.returncode == 0, first.stderr[-3000:]
    shutil.copytree(plain / "results", packed / "results")
    out = cli("--results", "results", "compact", cwd=packed)
    assert out.returncode == 0 and "train_steps" in out.stdout, out.stderr
    tables = packed / "results" / "_store" / "tables"
    assert not list((tables / "train_steps").glob("rl_*")) and list((tables / "train_steps").glob("packed-*"))
    before, after = _answers(plain, short, capfd, monkeypatch), _answers(packed, short, capfd, monkeypatch)
    for name in before:
        assert after[name] == before[name], name
    assert before["eval_grades"], before["rescore"]
    assert "ext: healthy" in " ".join(before["doctor"][1])

    [short_run] = load_sweep(short).runs
    long_ = _sweep_runs(tmp_path, "ext", rl.replace("steps: 4,", "steps: 8,"), extra=tracking)
    [run] = load_sweep(long_).runs
    dry = snakemake(packed, long_, "-n")
    assert "1 RL run(s) extend a finished shorter run" in dry.stderr
    again = snakemake(packed, long_)
    assert again.returncode == 0, again.stderr[-3000:]
    log = again.stdout + again.stderr
    assert f"steps 1-4 taken from the finished run {short_run.run_id} with 2 evaluation(s); it trains 5-8" in log
    assert planned_jobs(log)["rl"] == 2  # the segments that end at 6 and 8; those that end at 2 and 4 were taken
    assert "resuming from checkpoint at step 4/8" in log and "resuming from checkpoint at step 6/8" in log
    results = packed / "results"
    assert json.loads(segment_done(results, "rl", run.run_id, 4).read_text())["extended_from"] == short_run.run_id
    runs = query(f"SELECT status, wall_s FROM runs WHERE run_id = '{run.run_id}' AND stage = 'rl'",
                 results).to_pylist()
    assert [r["status"] for r in runs] == ["completed"]
    # the evaluations of the taken steps (2, 4) are the finished run's, copied; 6 and 8 sampled
    evals = query(f"SELECT eval_step, backend FROM runs WHERE stage = 'eval' AND parent_id = '{run.run_id}'",
                  results).to_pylist()
    assert {r["eval_step"]: r["backend"] for r in evals if r["eval_step"] > 0} == \
        {2: "copy", 4: "copy", 6: "local", 8: "local"}

    def scores(run_id):
        return query(f"SELECT step, benchmark, k, avg_at_k, pass_at_k FROM eval_scores WHERE run_id = '{run_id}' "
                     "AND step IN (2, 4) ORDER BY ALL", results).to_pylist()
    assert scores(run.run_id) and scores(run.run_id) == scores(short_run.run_id)
    # the extension is one tracker run of its own holding its donor's steps (from the pack) and its new ones, each
    # once with train_steps' value, and every evaluation at its step, copied or sampled
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(results / "ext" / "tensorboard" / f"{run.label}_{run.run_id}"),
                           size_guidance={"scalars": 0})
    acc.Reload()
    rewards = {r["step"]: r["reward"] for r in _rows(results, run.run_id)}
    sent = [(e.step, e.value) for e in acc.Scalars("train/reward")]
    assert sorted(s for s, _ in sent) == list(range(1, 9)) and all(v == pytest.approx(rewards[s]) for s, v in sent)
    assert sorted(e.step for e in acc.Scalars("eval/arithmetic/avg_at_2")) == [2, 4, 6, 8]

    scratch = tmp_path / "scratch"
    rcfg = run.stage_config("rl")
    one = run_stage("rl", "s", run.run_id, rcfg, results_root=scratch)
    got, ref = _weights(done_path(results, "rl", run.run_id)), _weights(one)
    assert all(torch.equal(got[k], ref[k]) for k in ref)
    assert _rows(results, run.run_id) == _rows(scratch, run.run_id)
    assert [r["step"] for r in _rows(results, run.run_id)] == list(range(1, 9))
    assert _rows(results, run.run_id)[:4] == _rows(results, short_run.run_id)
