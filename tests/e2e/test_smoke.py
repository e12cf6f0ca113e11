"""`rlsweep smoke`: any sweep shrunk to minutes on this machine, with its own DAG: verl runs on the tiny local model
on the CPU, a few steps, one seed; the demo's smoke runs end to end here."""

from __future__ import annotations

import yaml
import pytest

from helpers import REPO, run_cli
from workflow.models import TINY
from workflow.results.catalog import query
from workflow.smoke import smoke_sweep
from workflow.sweep.expand import load_sweep

pytestmark = pytest.mark.slow  # not in the fast tier: smoke sweeps through Snakemake


@pytest.mark.parametrize("name", ["sft_then_rl", "verl_grpo_gxpo", "optuna_sfpo_gxpo", "gxpo_k_alpha_tau"])
def test_every_reference_sweep_has_a_valid_smoke_version_with_its_dag(name, tmp_path):
    if name in ("sft_then_rl", "verl_grpo_gxpo"):
        pytest.importorskip("verl")
    original = load_sweep(REPO / "sweeps" / f"{name}.yaml")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(smoke_sweep(yaml.safe_load((REPO / "sweeps" / f"{name}.yaml").read_text())),
                                   sort_keys=False))  # the Optuna space is sampled in file order
    smoke = load_sweep(path)
    assert smoke.name == f"{name}-smoke"
    labels = {r.label for r in original.runs}
    assert {r.label for r in smoke.runs} == labels  # the same grid points ...
    assert len(smoke.runs) == len(labels)  # ... one seed each
    for r in smoke.runs:
        c = r.config
        assert (c.rl.steps, c.rl.prompts_per_step, c.sft.steps, c.eval.k, c.eval.n_problems) == (2, 4, 4, 2, 4)
        if c.engine.name == "verl":
            v = c.engine.verl
            assert (v.model_path, v.device, v.n_gpus_per_node, v.overrides) == (TINY, "cpu", 1, {})
            assert c.eval.backend == "vllm" and c.task.limit == 64
    if original.spec.optuna is not None:
        assert smoke.spec.optuna.n_trials == 2 and smoke.spec.optuna.pruner.name == "none"


def test_smoke_of_the_demo_runs_end_to_end(tmp_path):
    res = run_cli("smoke", "sweeps/demo.yaml", "--results", str(tmp_path), "--snakemake", "--cores 2",
                  timeout=900)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    rows = query("SELECT r.method, max(t.step) AS steps FROM train_steps t JOIN runs r ON r.run_id = t.run_id "
                 "AND r.stage = 'rl' WHERE t.stage = 'rl' GROUP BY r.method", tmp_path, "demo-smoke").to_pylist()
    assert sorted((r["method"], r["steps"]) for r in rows) == [("grpo", 2), ("gxpo", 2), ("sfpo", 2)]
    assert (tmp_path / "demo-smoke" / "summary.md").is_file() and (tmp_path / "demo-smoke.yaml").is_file()


def test_smoke_refuses_an_invalid_sweep_with_its_own_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ngrid: {rl.lrr: [1.0]}\n")
    res = run_cli("smoke", str(bad), "--results", str(tmp_path))
    assert res.returncode == 2 and "grid.rl.lrr: unknown key 'lrr' in rl" in res.stderr
