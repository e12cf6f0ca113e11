"""`rlsweep validate` and `rlsweep status`."""

from __future__ import annotations

from helpers import REPO, cli, write_sweep
from workflow.launch import run_stage
from workflow.sweep.expand import load_sweep


def test_validate_lists_runs_and_rejects_bad_sweeps(tmp_path):
    good = write_sweep(tmp_path / "g.yaml", "g", "grid: {rl.lr: [1.0e-4, 2.0e-4]}\nseeds: [0, 1]\n")
    res = cli("validate", str(good))
    assert res.returncode == 0 and "4 runs, 1 SFT jobs" in res.stdout
    for r in load_sweep(good).runs:
        assert r.run_id in res.stdout
    bad = write_sweep(tmp_path / "b.yaml", "b", "grid: {rl.group_size: [1]}\n")
    res = cli("validate", str(bad))
    assert res.returncode == 2
    assert f"{bad}: grid point {{rl.group_size: 1, seed: 0}}: rl.group_size: Input should be greater than or " \
           f"equal to 2" in res.stderr


def test_status_follows_the_stages(tmp_path, tmp_results):
    sweep_file = write_sweep(tmp_path / "s.yaml", "s", "grid: {rl.lr: [1.0e-4, 2.0e-4]}\n")
    status = cli("--results", str(tmp_results), "status", str(sweep_file), env={"COLUMNS": "200"})
    assert status.returncode == 0 and status.stdout.count("pending") == 2 * 3

    sweep = load_sweep(sweep_file)
    run = sweep.runs[0]
    run_stage("sft", "s", run.sft_id, run.stage_config("sft"), results_root=tmp_results)
    status = cli("--results", str(tmp_results), "status", str(sweep_file), env={"COLUMNS": "200"})
    lines = {line.split()[1]: line for line in status.stdout.splitlines() if line.strip()[:1] == "│"}
    for r in sweep.runs:  # both runs share the SFT job, which is now done; RL and eval are not
        assert "done" in lines[r.run_id] and lines[r.run_id].count("pending") == 2


def test_the_shipped_sweeps_are_valid():
    demo = load_sweep(REPO / "sweeps" / "demo.yaml")
    assert len(demo.runs) == 6 and len(demo.jobs("sft")) == 1  # one SFT, GRPO vs SFPO vs GXPO x 2 seeds
    assert sorted({r.method for r in demo.runs}) == ["grpo", "gxpo", "sfpo"]
    sfpo = load_sweep(REPO / "sweeps" / "sfpo_k_alpha.yaml")
    assert {(r.config.rl.sfpo.K, r.config.rl.sfpo.alpha) for r in sfpo.runs if r.method == "sfpo"} == \
        {(k, a) for k in (3, 5, 10) for a in (0.1, 0.5, 0.8, 1.0)}
    gxpo = load_sweep(REPO / "sweeps" / "gxpo_k_alpha_tau.yaml")
    assert len({(r.config.rl.gxpo.K, r.config.rl.gxpo.alpha, r.config.rl.gxpo.tau) for r in gxpo.runs
                if r.method == "gxpo"}) == 27
    for sweep in (sfpo, gxpo):
        assert sum(r.method == "grpo" for r in sweep.runs) == 3  # one GRPO baseline per seed
