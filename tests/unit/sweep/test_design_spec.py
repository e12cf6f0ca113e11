"""`seeds:` as a design (seeds on demand): what a researcher writes, and every bad input refused with its key named
before anything runs. A list of seeds keeps its meaning and its run ids."""

from __future__ import annotations

import pytest

from helpers import refusal, write_sweep
from workflow.sweep.expand import load_sweep
from workflow.sweep.families import all_pairs, families

GRID = """
grid:
  rl.update: [grpo, sfpo, gxpo]
  rl.lr: [1.0e-4, 3.0e-4]
"""


def design(**keys) -> str:
    body = {"compare": "rl.update", "per_round": 5, "rounds": 3, **keys}
    return "seeds: {" + ", ".join(f"{k}: {v}" for k, v in body.items()) + "}\n"


def test_a_design_trains_its_first_round_and_keeps_the_run_ids_of_the_same_seeds(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path / "d.yaml", "d", GRID + design(first=2)))
    assert sorted({r.config.seed for r in sweep.runs}) == [2, 3, 4, 5, 6]
    fixed = load_sweep(write_sweep(tmp_path / "f.yaml", "d", GRID + "seeds: [2, 3, 4, 5, 6]\n"))
    assert {r.run_id for r in sweep.runs} == {r.run_id for r in fixed.runs}  # trained once, by either sweep
    assert sweep.spec.design.seeds_of_round(2) == [7, 8, 9, 10, 11]


def test_other_grid_keys_form_families_and_pairs_stay_within_them(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path / "d.yaml", "d", GRID + design()))
    found = families(sweep.spec, sweep.runs)
    assert [f.fixed for f in found] == ["rl.lr=0.0001", "rl.lr=0.0003"]
    assert all(len(f.pairs) == 3 for f in found) and len(all_pairs(found)) == 6
    for f in found:  # never a setting against one of another family
        assert all(f.fixed in a and f.fixed in b for a, b in f.pairs)


def test_compare_baseline_pairs_every_setting_with_the_baseline(tmp_path):
    body = GRID + design(compare="baseline") + "report: {baseline: 'rl.update=grpo rl.lr=0.0001'}\n"
    sweep = load_sweep(write_sweep(tmp_path / "d.yaml", "d", body))
    pairs = all_pairs(families(sweep.spec, sweep.runs))
    assert len(pairs) == 5 and all(a == "rl.update=grpo rl.lr=0.0001" for a, _ in pairs)


@pytest.mark.parametrize("body, key, reason", [
    ("grid: {rl.update: [grpo]}\n" + design(), "seeds.compare", "has one value"),
    (GRID + design(compare="rl.kl_coef"), "seeds.compare", "is not a key the sweep varies"),
    (GRID + design(compare="baseline"), "seeds.compare", "report.baseline, which is not set"),
    ("grid: {rl.update: [grpo, sfpo], rl.sfpo.K: {values: [2, 3], when: {rl.update: sfpo}}}\n" + design(),
     "seeds.compare", "makes no pair"),
    (GRID + design(per_round=1, rounds=4), "seeds.per_round", "no round can ever decide"),
    (GRID + design(error=0), "seeds.error", "must be in (0, 1)"),
    (GRID + design(error=1.5), "seeds.error", "must be in (0, 1)"),
    (GRID + design(rounds=0), "seeds.rounds", "greater than or equal to 1"),
    (GRID + design(gpu_hours=-1), "seeds.gpu_hours", "greater than 0"),
    (GRID + design(bogus=1), "seeds.bogus", "unknown key"),
    (GRID + "seeds: {per_round: 5, rounds: 3}\n", "seeds.compare", "Field required"),
    (GRID + "seeds: 5\n", "seeds", "must be a list of seeds"),
    (design() + "optuna: {objective: avg_at_k, n_trials: 2, space: {rl.lr: {type: float, low: 1.0e-5, high: 1.0e-3}}}\n",
     "seeds", "use one or the other"),
])
def test_bad_designs_are_refused_naming_the_key(tmp_path, body, key, reason):
    msg = refusal(write_sweep(tmp_path / "bad.yaml", "bad", body))
    assert f": {key}: " in msg and reason in msg, msg


def test_a_verl_design_validates_and_explains_itself(tmp_path):
    """A design on the verl engine: the shipped verl sweep with seeds on demand instead of its three seeds; its round
    1 is checked by verl's own config code like any run, and `rlsweep validate` explains it in one screen."""
    import yaml

    from helpers import REPO, run_cli
    raw = yaml.safe_load((REPO / "sweeps" / "verl_grpo_gxpo.yaml").read_text())
    raw["name"] = "verl_design"
    # (its grid's rl.gxpo.K applies to GXPO only, so `compare: rl.update` would pair nothing: GRPO's point has no K)
    raw["seeds"] = {"compare": "baseline", "per_round": 5, "rounds": 3, "error": 0.05, "gpu_hours": 500}
    raw.setdefault("report", {})["baseline"] = "rl.update=grpo"
    path = tmp_path / "verl_design.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    sweep = load_sweep(path)
    assert {r.config.engine.name for r in sweep.runs} == {"verl"} and len(sweep.runs) == 15
    from workflow.sweep.executor import record_executor
    record_executor(tmp_path / "results", "verl_design", "rlsweep-slurm", None, 100)  # started on a cluster
    out = run_cli("--results", str(tmp_path / "results"), "validate", str(path))
    assert out.returncode == 0, out.stderr
    assert "1 family, 2 pair(s), family-wise error 0.05" in out.stderr
    assert "the first round can decide" in out.stderr and "at most 45 RL run(s)" in out.stderr
    assert "budget 500 GPU-hours" in out.stderr
    # the same design run here, on a machine without GPUs, is priced in hours: its jobs would use no GPU
    record_executor(tmp_path / "results", "verl_design", "local", 2, None)
    here = run_cli("--results", str(tmp_path / "results"), "validate", str(path), env={"CUDA_VISIBLE_DEVICES": ""})
    assert "budget 500 hours" in here.stderr and "GPU-hours" not in here.stderr, here.stderr


def test_validate_warns_when_the_first_round_cannot_decide(tmp_path):
    from helpers import run_cli
    path = write_sweep(tmp_path / "w.yaml", "w", GRID + design(per_round=4, rounds=2))
    out = run_cli("--results", str(tmp_path / "results"), "validate", str(path))
    assert out.returncode == 0, out.stderr
    assert ("warning: seeds.per_round 4 is too small for the first round to decide (C(8, 4) = 70 splits: 2/70 > "
            "0.05/2); the earliest decision is at round 2 of 2. per_round >= 5 decides from the first round") in \
        " ".join(out.stderr.split())
