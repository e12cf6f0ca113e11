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


def counts(stages) -> dict[str, dict[str, int]]:
    return {p.stage: {k: v for k, v in p.counts.items() if v} for p in stages}


def test_jobs_by_state_and_the_gpu_hours_left(tmp_path):
    from workflow.sweep.expand import load_sweep
    from workflow.sweep.plan import plan
    sweep = load_sweep(write_sweep(tmp_path / "p.yaml", "p", SWEEP))
    root = tmp_path / "results"
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
    assert "GPU-hours left at most (some from time limits)" in res.stderr


def test_the_plan_reads_in_whole_words_at_80_columns(tmp_path):
    """Before: ten columns at 80 wrapped every header into cut-off words ("part…", "GPU-h…", "esti…")."""
    res = cli("plan", str(REPO / "sweeps" / "fast_grpo.yaml"), "--results", str(tmp_path), env={"COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    table = res.stdout[:res.stdout.index("└")]
    assert "…" not in table and max(map(len, table.splitlines())) <= 80
    for word in ("stage", "done", "partial", "failed", "running", "new", "hours", "GPU-hours", "left"):
        assert f" {word} " in table, word
    assert "rl: each job to run asks 1 node x 1 GPU" in " ".join(res.stdout.split())
