"""`rlsweep plan`: each job's state from what is on disk and in the runs table, and the GPU-hours left: measured
from finished jobs of the same stage, engine and model where there are some, else the time limits (upper bound).
(Before and after a real run: tests/e2e/test_workflow_e2e.py.)"""

from __future__ import annotations

import json

import pytest

from helpers import REPO, cli, write_sweep
from workflow.layout import done_path, stage_dir, step_dir, train_steps_file
from workflow.results.writer import write_rows

SWEEP = """
grid:
  rl.lr: [1.0e-4, 2.0e-4]
seeds: [0, 1]
resources:
  rl: {gpus_per_node: 2, time: "02:00:00"}
"""


def on_slurm(root, *sweeps: str) -> None:
    """The sweeps started on SLURM (as the Snakefile records it): their jobs use the GPUs they ask."""
    from workflow.sweep.executor import record_executor
    for name in sweeps:
        record_executor(root, name, "rlsweep-slurm", None, 100)


def counts(stages) -> dict[str, dict[str, int]]:
    return {p.stage: {k: v for k, v in p.counts.items() if v} for p in stages}


def test_jobs_by_state_and_the_gpu_hours_left(tmp_path):
    from workflow.sweep.expand import load_sweep
    from workflow.sweep.plan import plan
    sweep = load_sweep(write_sweep(tmp_path / "p.yaml", "p", SWEEP))
    root = tmp_path / "results"
    on_slurm(root, "p")
    fresh = plan(sweep, root)
    assert counts(fresh) == {"sft": {"new": 1}, "rl": {"new": 4}, "eval": {"new": 4}}
    rl = next(p for p in fresh if p.stage == "rl")
    assert rl.bounded == 4 and rl.gpu_hours == pytest.approx(4 * 2.0 * 2)  # time limit x GPUs, an upper bound

    done, partial, failed, new = sweep.runs
    sft = stage_dir(root, "sft", done.sft_id)
    sft.mkdir(parents=True)
    (sft / "DONE.json").write_text("{}")
    for run in (done, partial, failed):
        write_rows(root, "runs", f"rl_{run.run_id}", [dict(run_id=run.run_id, sweep="p", stage="rl",
                   status={done.run_id: "completed", failed.run_id: "failed"}.get(run.run_id, "interrupted"),
                   wall_s=40.0)])
    out = stage_dir(root, "rl", done.run_id)
    out.mkdir(parents=True)
    (out / "DONE.json").write_text("{}")
    write_rows(root, "train_steps", train_steps_file("rl", done.run_id, 1, 4), [dict(run_id=done.run_id, sweep="p",
               stage="rl", step=s, wall_s=9.0) for s in range(1, 5)])  # 9 s a step measured
    ckpt = step_dir(stage_dir(root, "rl", partial.run_id) / "checkpoints", 3)
    ckpt.mkdir(parents=True)
    (ckpt / "meta.json").write_text(json.dumps({"step": 3}))
    step, group = done.eval_jobs[0]
    evaluated = done_path(root, "eval", done.eval_id, done.run_id, step, group)
    evaluated.parent.mkdir(parents=True)
    evaluated.write_text("{}")

    stages = plan(load_sweep(sweep.path), root)
    assert counts(stages) == {"sft": {"done": 1}, "rl": {"done": 1, "partial": 1, "failed": 1, "new": 1},
                              "eval": {"done": 1, "new": 3}}
    rl = next(p for p in stages if p.stage == "rl")
    # same engine, model and GPUs as the finished run: 9 s a step x the steps left (1, 4, 4) x 2 GPUs
    assert rl.measured == 3 and rl.bounded == 0 and rl.gpu_hours == pytest.approx(9 * (1 + 4 + 4) * 2 / 3600)
    assert "1 node x 2 GPU" in rl.asks and "02:00:00" in rl.asks
    assert not any(p.measured for p in stages if p.stage == "eval")  # no eval job's wall-clock recorded yet

    # SLURM's accounting of the finished job (start-up and checkpoints included): its GPU-hours per step win
    write_rows(root, "runs", f"rl_{done.run_id}", [dict(run_id=done.run_id, sweep="p", stage="rl",
               status="completed", wall_s=40.0, gpu_hours=0.04, slurm_gpus=2)])  # 0.01 GPU-hours a step
    rl = next(p for p in plan(load_sweep(sweep.path), root) if p.stage == "rl")
    assert rl.measured == 3 and rl.gpu_hours == pytest.approx(0.01 * (1 + 4 + 4))
    assert rl.hours == pytest.approx(9 * (1 + 4 + 4) / 3600)  # hours still from the measured steps

    res = cli("plan", sweep.path, "--results", str(root), env={"COLUMNS": "250"})
    assert res.returncode == 0, res.stderr
    row = next(line for line in res.stdout.splitlines() if line.startswith("│ rl"))
    assert [c.strip() for c in row.strip("│").split("│")][:6] == ["rl", "1", "1", "1", "0", "1"]
    assert "at most " in res.stdout and "GPU-hours left (some from time limits)" in res.stderr  # (eval's)
    assert "runs on SLURM (100 jobs at once)" in res.stderr


def test_the_plan_reads_in_whole_words_at_80_columns(tmp_path):
    """Before: ten columns at 80 wrapped every header into cut-off words ("part…", "GPU-h…", "esti…")."""
    res = cli("plan", str(REPO / "sweeps" / "fast_grpo.yaml"), "--results", str(tmp_path), "--on", "slurm",
              env={"COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    table = res.stdout[:res.stdout.index("└")]
    assert "…" not in table and max(map(len, table.splitlines())) <= 80
    for word in ("stage", "done", "partial", "failed", "running", "new", "hours", "GPU-hours", "left"):
        assert f" {word} " in table, word
    assert "rl: each job to run asks 1 node x 1 GPU" in " ".join(res.stdout.split())


def finished_elsewhere(root, sweep, run, seconds_per_step: float, gpus=None, update_s=None, passes=None):
    """What a job of another sweep leaves in the store: its runs row (with its config, as every stage job writes it)
    and its train_steps rows (their update seconds and backward passes when given)."""
    from workflow.identity import canonical_json
    write_rows(root, "runs", f"rl_{run.run_id}", [dict(run_id=run.run_id, sweep=sweep, stage="rl", status="completed",
               wall_s=60.0, slurm_gpus=gpus, config=canonical_json(run.stage_config("rl")))])
    write_rows(root, "train_steps", train_steps_file("rl", run.run_id, 1, 4), [dict(
        run_id=run.run_id, sweep=sweep, stage="rl", step=s, wall_s=seconds_per_step, update_s=update_s,
        backward_passes=passes[s - 1] if isinstance(passes, list) else passes) for s in range(1, 5)])


def test_a_new_sweep_is_estimated_from_finished_jobs_of_its_shape_in_the_whole_store(tmp_path):
    """Issue 63: the store's finished jobs of another sweep count when they match the job's cost key (engine, model,
    GPUs, and what multiplies a step: the rule's K here); another K, or another GPU count SLURM accounted, does not."""
    from workflow.sweep.expand import load_sweep
    from workflow.sweep.plan import plan
    root = tmp_path / "results"
    base = "resources:\n  rl: {gpus_per_node: 2, time: '02:00:00'}\ngrid:\n  rl.update: [sfpo]\n  rl.sfpo.K: [%s]\n"
    new = load_sweep(write_sweep(tmp_path / "new.yaml", "new", base % "3"))
    on_slurm(root, "new")
    [run] = new.runs
    # another sweep's run at another learning rate (not the shape) and K 3 took 5 s a step; one at K 5, 50 s
    other = load_sweep(write_sweep(tmp_path / "old.yaml", "old", base % "3, 5" + "  rl.lr: [7.0e-4]\n"))
    same = next(r for r in other.runs if r.config.rl.sfpo.K == 3)
    finished_elsewhere(root, "old", same, 5.0)
    finished_elsewhere(root, "old", next(r for r in other.runs if r.config.rl.sfpo.K == 5), 50.0)
    rl = next(p for p in plan(new, root) if p.stage == "rl")
    assert same.run_id != run.run_id and rl.measured == 1 and rl.bounded == 0
    assert rl.hours == pytest.approx(5.0 * run.config.rl.steps / 3600)  # K 3's 5 s a step, not K 5's
    assert rl.sources == {"old": {("rl", same.run_id)}}

    # the same shape measured on 4 GPUs (SLURM's accounting) says nothing of a job that asks 2
    finished_elsewhere(root, "old", same, 5.0, gpus=4)
    rl = next(p for p in plan(new, root) if p.stage == "rl")
    assert rl.measured == 0 and rl.bounded == 1

    res = cli("plan", str(new.path), "--results", str(root), env={"COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    assert "rl: each job to run asks 1 node x 2 GPU" in " ".join(res.stdout.split())
    assert "1 from time limits (upper bound)" in " ".join(res.stdout.split())


def test_another_k_is_estimated_from_the_measured_k_with_the_update_scaled_by_the_passes(tmp_path):
    """Issue 63, item 4: SFPO at K 5 (6 backward passes a step while active) from a run at K 3 (4): the step's update
    time scales with the passes, its generation does not; GXPO takes 3 passes whatever its K, so another K is its
    shape exactly; GRPO's one pass says nothing of how often a rule's extra passes run, so it is not scaled from."""
    from workflow.sweep.expand import load_sweep
    from workflow.sweep.plan import plan
    root = tmp_path / "results"
    base = "grid:\n  rl.update: [%s]\n  rl.%s.K: [%d]\n"
    old = load_sweep(write_sweep(tmp_path / "old.yaml", "old", base % ("sfpo", "sfpo", 3)))
    # 10 s a step, 8 of them in the update; every other step ran its extra passes (2.5 passes a step on average)
    finished_elsewhere(root, "old", old.runs[0], 10.0, update_s=8.0, passes=[4, 1, 4, 1])
    new = load_sweep(write_sweep(tmp_path / "new.yaml", "new", base % ("sfpo", "sfpo", 5)))
    rl = next(p for p in plan(new, root) if p.stage == "rl")
    would = 1 + 0.5 * 5  # the same share of steps with extra passes: 5 of them instead of 3
    assert rl.measured == 1 and rl.bounded == 0 and rl.sources == {"old": {("rl", old.runs[0].run_id)}}
    assert rl.hours == pytest.approx((10.0 + 8.0 * (would / 2.5 - 1)) * new.runs[0].config.rl.steps / 3600)

    gxpo = load_sweep(write_sweep(tmp_path / "g3.yaml", "g3", base % ("gxpo", "gxpo", 3)))
    finished_elsewhere(root, "g3", gxpo.runs[0], 7.0, update_s=5.0, passes=3)
    rl = next(p for p in plan(load_sweep(write_sweep(tmp_path / "g5.yaml", "g5", base % ("gxpo", "gxpo", 5))), root)
              if p.stage == "rl")
    assert rl.measured == 1 and rl.hours == pytest.approx(7.0 * gxpo.runs[0].config.rl.steps / 3600)  # unscaled

    grpo = load_sweep(write_sweep(tmp_path / "grpo.yaml", "grpo", "grid:\n  rl.update: [grpo]\n"))
    finished_elsewhere(root, "grpo", grpo.runs[0], 3.0, update_s=1.0, passes=1)
    rl = next(p for p in plan(load_sweep(write_sweep(tmp_path / "k7.yaml", "k7", base % ("sfpo", "sfpo", 7))), root)
              if p.stage == "rl")
    assert rl.sources == {"old": {("rl", old.runs[0].run_id)}}  # from SFPO's run, not GRPO's


def test_a_measured_estimate_names_its_sources_and_says_it_leaves_out_queueing(tmp_path):
    from workflow.sweep.expand import load_sweep
    root = tmp_path / "results"
    new = load_sweep(write_sweep(tmp_path / "new.yaml", "new", "seeds: [0, 1]\n"))
    old = load_sweep(write_sweep(tmp_path / "old.yaml", "old", "seeds: [7]\n"))
    finished_elsewhere(root, "old", old.runs[0], 2.0)
    res = cli("plan", str(new.path), "--results", str(root), env={"COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    text = " ".join((res.stdout + res.stderr).split())
    assert "hours of the 2 to run: 2 from 1 finished job of the same shape (old: 1)" in text, text
    assert "measured estimates leave out queueing" in text


def test_the_steps_a_run_takes_from_a_finished_shorter_run_cost_nothing(tmp_path):
    """The demo taken to more steps under another name: its runs take the finished runs' steps (workflow/extend.py),
    so only the steps after them are estimated, from the finished runs' own measurements, and the evaluations the
    finished run made of the taken steps are copies."""
    from workflow.atomic import write_json
    from workflow.extend import extensions, record_trajectory
    from workflow.identity import stable_id
    from workflow.sweep.expand import load_sweep
    from workflow.sweep.plan import plan
    root = tmp_path / "results"
    body = "base:\n  sft: {enabled: false}\n  rl: {steps: %d, checkpoint_every: 2}\n  eval: {every: 2, k: 2}\n"
    [short] = load_sweep(write_sweep(tmp_path / "short.yaml", "short", base=body % 4)).runs
    longer = load_sweep(write_sweep(tmp_path / "long.yaml", "long", base=body % 10))
    d = stage_dir(root, "rl", short.run_id)  # finished as the launcher leaves a run
    for s in (2, 4):
        write_json(step_dir(d / "checkpoints", s) / "meta.json", {"step": s})
    write_json(d / "config.json", short.stage_config("rl"))
    write_json(done_path(root, "rl", short.run_id), {"stage": "rl", "id": short.run_id, "step": 4})
    record_trajectory(root, short.stage_config("rl"), short.run_id)
    finished_elsewhere(root, "short", short, 3.0)
    assert len(extensions(root, longer.runs)[0]) == 1  # it extends the finished run
    theirs = stable_id({**longer.runs[0].stage_config("eval"), "run_id": short.run_id})
    write_json(done_path(root, "eval", theirs, short.run_id, 4, "arithmetic"), {})  # the donor evaluated step 4
    stages = {p.stage: p for p in plan(longer, root)}
    assert stages["rl"].taken == 4 and stages["rl"].measured == 1
    assert stages["rl"].hours == pytest.approx(3.0 * (10 - 4) / 3600)  # steps 5-10 at the donor's 3 s a step
    # steps 2-10 evaluated: step 4's a copy of the donor's (counted apart, issue 82), step 2's (the donor has none)
    # to run
    assert stages["eval"].counts["new"] == 4 and stages["eval"].copies == 1
    assert stages["eval"].measured + stages["eval"].bounded == 4


def test_status_sets_what_each_stage_and_method_used_against_the_plan_at_the_start(tmp_path):
    """Issue 63, item 2: the plan recorded when the sweep first ran (the Snakefile calls record_plan), and `rlsweep
    status` beside it: hours and GPU-hours per stage and RL method, from the sweep's own runs rows (SLURM's GPU-hours
    where it accounted them, else wall-clock x the GPUs the stage asks); a stage over twice its plan is flagged."""
    from workflow.sweep.expand import load_sweep
    from workflow.sweep.plan import record_plan, recorded_plan
    root = tmp_path / "results"
    old = load_sweep(write_sweep(tmp_path / "old.yaml", "old", "grid:\n  rl.update: [grpo, sfpo]\n"))
    for run in old.runs:  # measured elsewhere: 1 s a step
        finished_elsewhere(root, "old", run, 1.0)
    sweep = load_sweep(write_sweep(tmp_path / "p.yaml", "p", "grid:\n  rl.update: [grpo, sfpo]\n  rl.lr: [2.0e-4]\n"
                                   "resources:\n  rl: {gpus_per_node: 2}\n"))
    on_slurm(root, "p")
    assert record_plan(sweep, root) and not record_plan(sweep, root)  # written once
    planned = recorded_plan(root, "p")["stages"]["rl"]
    steps = sweep.runs[0].config.rl.steps
    assert planned["measured"] == 2 and planned["hours"] == pytest.approx(2 * steps * 1.0 / 3600)
    grpo, sfpo = sorted(sweep.runs, key=lambda r: r.method)
    write_rows(root, "runs", f"rl_{grpo.run_id}", [dict(run_id=grpo.run_id, sweep="p", stage="rl", method="grpo",
               status="completed", wall_s=steps * 1.0)])  # as planned, on 2 GPUs
    write_rows(root, "runs", f"rl_{sfpo.run_id}", [dict(run_id=sfpo.run_id, sweep="p", stage="rl", method="sfpo",
               status="completed", wall_s=steps * 9.0, gpu_hours=0.5)])  # 9x slower; SLURM accounted 0.5 GPU-h
    res = cli("status", str(sweep.path), "--results", str(root), env={"COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    rows = {tuple(c.strip() for c in line.strip("│").split("│"))[:2]: [c.strip() for c in line.strip("│").split("│")]
            for line in res.stdout.splitlines() if line.startswith(("│ rl", "│ sft"))}
    assert [float(c) for c in rows["rl", "grpo"][2:5]] == pytest.approx([1, steps / 3600, steps * 2 / 3600], rel=0.05)
    assert float(rows["rl", "sfpo"][4]) == 0.5
    total = rows["rl", "all"]
    assert total[2] == "2" and float(total[4]) == pytest.approx(steps * 2 / 3600 + 0.5, rel=0.05)
    assert float(total[5]) == pytest.approx(planned["gpu_hours"], rel=0.05) and "x the plan" in total[7]  # flagged
    assert rows["sft", "all"][2:5] == ["0", "0", "0"] and rows["sft", "all"][5].startswith("at most ")  # not run yet
    # the report's "Cost" section holds the same lines (workflow/report/cost.py)
    from workflow.report.cost import section
    from workflow.results.catalog import Catalog
    from workflow.sweep.plan import cost_rows
    cost = section(*cost_rows(sweep, root, Catalog(root, "p", planned=sweep.members())))
    lines = {(r[0].text, r[1].text): r for r in cost.tables[0].rows}
    assert cost.title == "Cost: planned against used" and lines["rl", "all"][7].mark == "failed"
    assert [c.text for c in lines["rl", "sfpo"][2:5]] == [c for c in rows["rl", "sfpo"][2:5]]


def test_a_cpu_only_sweep_counts_hours_never_gpu_hours_and_says_at_most_for_time_limits(tmp_path, monkeypatch):
    """Issue 82, item 2: the default resources ask SLURM for a GPU per job, but a sweep run on a machine without GPUs
    uses none: its plan, its status and its report count plain hours (the jobs' runs rows say gpus 0); a figure from
    time limits says "at most"; once the store has measured the stage's shape the estimate now stands beside the
    first plan."""
    from workflow.sweep.executor import executor_of, record_executor
    from workflow.sweep.expand import load_sweep
    from workflow.sweep.plan import plan, record_plan, recorded_plan
    root = tmp_path / "results"
    sweep = load_sweep(write_sweep(tmp_path / "c.yaml", "c", "seeds: [0, 1]\n"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # (a machine without GPUs, even where the tests run on one)
    record_executor(root, "c", "local", 2, None)
    assert executor_of(root, "c").gpus == 0
    first = {p.stage: p for p in plan(sweep, root)}
    assert first["rl"].gpus == 0 and first["rl"].gpu_hours == 0 and first["rl"].hours == pytest.approx(2 * 24)
    record_plan(sweep, root)
    assert recorded_plan(root, "c")["stages"]["rl"]["gpu_hours"] == 0
    res = cli("plan", str(sweep.path), "--results", str(root), env={"COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    assert "GPU-hours" not in res.stdout + res.stderr and "at most 68.00 hours (on the CPU) left" in res.stderr  # 12 + 2 x 24 + 2 x 4
    assert "runs on this machine (2 cores, no GPU)" in res.stderr
    # one run trained, on the CPU (gpus 0 in its row), at 2 s a step: the other is now estimated from it
    done = sweep.runs[0]
    write_rows(root, "runs", f"rl_{done.run_id}", [dict(run_id=done.run_id, sweep="c", stage="rl", method="grpo",
               status="completed", wall_s=8.0, gpus=0, config=json.dumps(done.stage_config("rl")))])
    write_rows(root, "train_steps", train_steps_file("rl", done.run_id, 1, 4), [dict(
        run_id=done.run_id, sweep="c", stage="rl", step=s, wall_s=2.0) for s in range(1, 5)])
    (stage_dir(root, "rl", done.run_id)).mkdir(parents=True)
    (stage_dir(root, "rl", done.run_id) / "DONE.json").write_text("{}")
    res = cli("status", str(sweep.path), "--results", str(root), env={"COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    assert "GPU-hours" not in res.stdout + res.stderr
    cells = {tuple(c.strip() for c in line.strip("│").split("│"))[:2]: [c.strip() for c in line.strip("│").split("│")]
             for line in res.stdout.splitlines() if line.startswith("│ ")}
    head = next(line for line in res.stdout.splitlines() if "planned" in line)
    assert "estimate now" in res.stdout and "planned hours" in " ".join(res.stdout.split())
    rl = cells["rl", "all"]
    assert rl[3] == f"{8 / 3600:.2g}" and rl[4] == "at most 48" and rl[5] == f"{16 / 3600:.2g}", (head, rl)

