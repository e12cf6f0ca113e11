"""Every sweep in sweeps/ keeps its ids. A stage id is the hash of the config its job is handed, so an id that
moves means a refactor changed what a stage computes (or how it is named), and every finished result of every
user's sweep would be recomputed. The recorded ids (tests/fixtures/ids/sweeps.json) were written by
`python tests/unit/sweep/test_run_ids.py --write` before the renovation of issue 29; rewrite them only for a change that is
meant to move ids (`--write NAME.yaml` rewrites that sweep's alone), and say so in the commit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]  # (run as a script too: --write)

RECORDED = REPO / "tests" / "fixtures" / "ids" / "sweeps.json"
# an Optuna study plans no runs up front: its trials' runs come from proposals, so fixed proposals stand in
TRIALS = {"optuna_sfpo_gxpo.yaml": [{"rl.update": "sfpo", "rl.sfpo.K": 3, "rl.sfpo.alpha": 0.5},
                                    {"rl.update": "gxpo", "rl.gxpo.K": 4, "rl.gxpo.alpha": 0.7, "rl.gxpo.tau": 1.5}]}


def ids_of(path: Path) -> list[dict]:
    from workflow.study.trials import trial_runs
    from workflow.sweep.expand import load_sweep
    from workflow.sweep.spec import read_spec
    runs = load_sweep(path).runs or [r for p in TRIALS.get(path.name, []) for r in trial_runs(read_spec(path), p)]
    return [{"label": r.label, "data": r.data_id, "overlap": r.overlap_id, "pretrain": r.pretrain_id, "sft": r.sft_id,
             "rl": r.run_id,
             "eval": r.eval_id, "start": r.start_key, "eval_jobs": [list(j) for j in r.eval_jobs]} for r in runs]


def current() -> dict[str, list[dict]]:
    return {p.name: ids_of(p) for p in sorted((REPO / "sweeps").glob("*.yaml"))}


RECORDS = json.loads(RECORDED.read_text()) if RECORDED.is_file() else {}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_every_sweep_keeps_its_stage_ids(name):
    assert RECORDS[name], f"{name}: nothing recorded"
    now = ids_of(REPO / "sweeps" / name)
    moved = [(was["label"], k, was[k], new[k]) for was, new in zip(RECORDS[name], now) for k in was if was[k] != new[k]]
    assert len(now) == len(RECORDS[name]) and not moved, moved[:5]


def test_every_sweep_is_recorded():
    assert sorted(p.name for p in (REPO / "sweeps").glob("*.yaml")) == sorted(RECORDS)


# A sweep that re-checks a longer one's result in less time runs exactly some of its runs (README, "A real model on
# CPU"): same ids, so one store serves both, and the check's number is the longer sweep's number for those runs.
SLICES = {"smollm2_cpu_check.yaml": "smollm2_cpu.yaml"}


@pytest.mark.parametrize("check", sorted(SLICES))
def test_a_check_sweep_is_a_slice_of_the_sweep_it_checks(check):
    full = {json.dumps(r, sort_keys=True) for r in ids_of(REPO / "sweeps" / SLICES[check])}
    part = [json.dumps(r, sort_keys=True) for r in ids_of(REPO / "sweeps" / check)]
    assert part and all(r in full for r in part), part


def test_the_real_model_mixed_check_shares_its_grpo_run_with_the_real_model_check():
    """sweeps/smollm2_mixed_cpu.yaml's GRPO run is smollm2_cpu_check's (same SFT, RL and evaluation ids): one store
    serves both, and the check's GRPO number is the mixed check's baseline."""
    check = {r["rl"]: r for r in ids_of(REPO / "sweeps" / "smollm2_cpu_check.yaml")}
    grpo, = [r for r in ids_of(REPO / "sweeps" / "smollm2_mixed_cpu.yaml") if r["label"] == "rl.mix=none"]
    assert grpo["rl"] in check and {k: v for k, v in grpo.items() if k != "label"} == {
        k: v for k, v in check[grpo["rl"]].items() if k != "label"}


if __name__ == "__main__" and sys.argv[1:2] == ["--write"]:
    # --write: every sweep's ids; --write NAME.yaml ...: only those sweeps' (a change meant to move one sweep's ids)
    sys.path.insert(0, str(REPO))
    names = sys.argv[2:]
    records = {**RECORDS, **{n: ids_of(REPO / "sweeps" / n) for n in names}} if names else current()
    RECORDED.write_text(json.dumps(records, indent=1) + "\n")
    print(f"wrote {RECORDED}" + (f" ({', '.join(names)})" if names else ""))
