"""train_steps.flops: one model (workflow/algos/flops.py) on the local engine and on verl's metrics."""

from __future__ import annotations

import pytest

from workflow.algos.flops import generation_flops, rl_step_flops, sft_flops, training_flops
from workflow.config import ModelConfig, RunConfig
from workflow.engines.local import TOKENIZER
from workflow.engines.tiny_lm import build_model
from workflow.engines.verl.controller.metrics import train_steps_row
from workflow.launch import run_stage
from workflow.results.catalog import query
from workflow.stages import stage_config
from workflow.identity import stable_id

N, D = 1000, 10


def test_sft_is_six_n_d():
    assert sft_flops(N, D) == 60_000 == training_flops(N, D)


def test_on_policy_rl_step_is_eight_n_d_per_pass_plus_six_per_extra_pass():
    assert generation_flops(N, D) == 20_000
    assert rl_step_flops(N, D, 1) == 80_000  # GRPO: 2ND generation + 6ND training
    assert rl_step_flops(N, D, 3) == 20_000 + 3 * 60_000  # SFPO K=2 / GXPO: 3 forward + backward passes
    assert rl_step_flops(N, D, 1, ref_model=True) == 100_000  # + 2ND: the reference model scores the batch


def test_off_policy_tokens_are_trained_but_not_generated():
    assert rl_step_flops(N, 0, 1, off_policy_tokens=D) == 60_000
    assert rl_step_flops(N, D, 2, off_policy_tokens=5, ref_model=True) == 2 * N * 10 + 6 * N * 15 * 2 + 2 * N * 15


MODEL = {"n_layers": 1, "hidden": 32, "n_heads": 2}


def n_params() -> int:
    return sum(p.numel() for p in build_model(ModelConfig(**MODEL), TOKENIZER.vocab_size, seed=0).parameters())


def test_local_sft_rows_carry_six_n_d_of_their_tokens(tmp_path):
    cfg = RunConfig.model_validate({"model": MODEL, "sft": {"steps": 2, "batch_size": 4, "checkpoint_every": 2}})
    scfg = stage_config(cfg, "sft")
    run_stage("sft", "f", stable_id(scfg), scfg, results_root=tmp_path)
    rows = query("SELECT tokens, flops FROM train_steps ORDER BY step", tmp_path).to_pylist()
    assert len(rows) == 2 and all(r["tokens"] > 0 for r in rows)
    assert [r["flops"] for r in rows] == [6.0 * n_params() * r["tokens"] for r in rows]


@pytest.mark.parametrize("update, kl_coef, passes", [("grpo", 0.0, 1), ("sfpo", 0.1, 3)])
def test_local_rl_rows_carry_the_models_value_of_their_tokens_and_passes(tmp_path, update, kl_coef, passes):
    rl = {"steps": 2, "checkpoint_every": 2, "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4,
          "update": update, "kl_coef": kl_coef, "sfpo": {"K": 2}}
    cfg = RunConfig.model_validate({"model": MODEL, "sft": {"enabled": False}, "rl": rl})
    rcfg = stage_config(cfg, "rl", sft_id=None)
    run_stage("rl", "f", stable_id(rcfg), rcfg, results_root=tmp_path)
    rows = query("SELECT * FROM train_steps ORDER BY step", tmp_path).to_pylist()
    n = n_params()
    for r in rows:
        assert r["backward_passes"] == passes
        assert r["tokens"] > r["response_len"] * r["rollouts"]  # prompt tokens count too
        ref = 2.0 * n * r["tokens"] if kl_coef else 0.0
        assert r["flops"] == 2.0 * n * r["tokens"] + 6.0 * n * r["tokens"] * passes + ref


def test_verl_metrics_give_flops_from_total_tokens_and_backward_passes():
    metrics = {"perf/total_num_tokens": 4096, "actor/rlsweep/backward_passes": 3.0, "response_length/mean": 100.0}
    row = train_steps_row(metrics, 1, 32, n_params=N)
    assert row["flops"] == 2.0 * N * 4096 + 6.0 * N * 4096 * 3
    with_ref = train_steps_row({"perf/total_num_tokens": 4096}, 1, 32, n_params=N, ref_model=True)
    assert with_ref["flops"] == 10.0 * N * 4096  # verl's own step: 1 pass; + the reference forward
    assert "flops" not in train_steps_row(metrics, 1, 32)  # without a parameter count: null, not a guess
