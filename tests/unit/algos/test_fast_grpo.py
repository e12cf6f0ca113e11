"""FAST-GRPO's three parts (workflow/algos/fast_grpo.py), each on a case small enough to check by hand, then through
a real local RL stage: the train_steps columns, the steps Slow2Fast leaves without a group, the run identity and the
settings refused before any job."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from workflow.config import RunConfig
from workflow.launch import run_stage
from workflow.methods.dynamic_kl import DynamicKLConfig
from workflow.methods.dynamic_kl.algorithm import group_kl_coef
from workflow.methods.slow2fast import Slow2FastConfig
from workflow.methods.slow2fast.algorithm import slow2fast_keep
from workflow.methods.thinking_reward import ThinkingRewardConfig
from workflow.methods.thinking_reward.algorithm import ThinkingReward
from workflow.results.catalog import query
from workflow.stages import stage_config
from workflow.strict import format_validation_error
from workflow.identity import stable_id


# --------------------------------------------------------------------------------------------- thinking reward
def bonus(shape: str = "linear"):
    """Five prompts of equal length (complexity 1 each), so difficulty = 1 - pass rate = [0, 0, 0, 0.5, 1]; the
    80th percentile of it is 0.6 (numpy's linear interpolation: 0.5 + 0.2 x 0.5): prompts 0-3 are easy, 4 hard.
    Responses of max_len 10 tokens, scale 0.5."""
    cfg = ThinkingRewardConfig(enabled=True, complexity="prompt_len", shape=shape)
    rewards = np.array([[1, 1], [1, 1], [1, 1], [1, 0], [0, 0]], float)
    lengths = np.array([[2, 8], [5, 5], [5, 5], [4, 6], [3, 10]], float)
    return ThinkingReward(cfg).bonus(rewards, lengths, 10, ["a", "b", "c", "d", "e"], [7] * 5)


def test_easy_correct_answers_earn_brevity_and_hard_wrong_ones_exploration():
    out, columns = bonus()
    assert out[0].tolist() == pytest.approx([0.5 * 0.8, 0.5 * 0.2])  # easy, correct: shorter earns more
    assert out[3].tolist() == pytest.approx([0.5 * 0.6, 0.0])  # easy: its wrong answer earns nothing
    assert out[4].tolist() == pytest.approx([0.5 * 0.3, 0.5 * 1.0])  # hard, wrong: longer earns more
    assert columns == pytest.approx({"thinking_bonus": out.mean(), "easy_frac": 0.8, "hard_frac": 0.2})
    assert (out < 1).all()  # scale < 1: a wrong answer never outscores a right one


def test_the_cosine_shape_is_flat_at_both_ends():
    out, _ = bonus("cosine")
    assert out[0, 0] == pytest.approx(0.5 * (1 - np.cos(np.pi * 0.8)) / 2)
    assert out[4, 1] == pytest.approx(0.5)


def test_pass_rate_and_complexity_from_a_precomputed_table(tmp_path):
    table = tmp_path / "difficulty.jsonl"
    table.write_text('{"prompt": "easy", "pass_rate": 1.0, "complexity": 1}\n'
                     '{"prompt": "hard", "pass_rate": 0.0, "complexity": 4}\n')
    cfg = ThinkingRewardConfig(enabled=True, pass_rate="table", complexity="table", table=str(table), percentile=50)
    rewards = np.zeros((2, 2))  # the group says both are unsolved; the table says otherwise
    out, columns = ThinkingReward(cfg).bonus(rewards, np.full((2, 2), 5.0), 10, ["easy", "hard"], [3, 3])
    assert columns["easy_frac"] == 0.5 and out[1].tolist() == pytest.approx([0.25, 0.25])
    with pytest.raises(ValueError, match="no pass_rate for the prompt 'other'"):
        ThinkingReward(cfg).bonus(rewards, np.full((2, 2), 5.0), 10, ["easy", "other"], [3, 3])


# ----------------------------------------------------------------------------------- dynamic KL and Slow2Fast
def test_the_kl_coefficient_follows_the_group_accuracy():
    cfg = DynamicKLConfig(enabled=True)
    assert group_kl_coef(np.array([0.0, 0.5, 1.0]), cfg).tolist() == pytest.approx([0.001, 0.0055, 0.01])


def test_each_slow2fast_phase_keeps_its_accuracy_band():
    cfg = Slow2FastConfig(enabled=True)
    accuracy = np.array([0.0, 0.25, 0.3, 0.5, 0.99, 1.0])
    assert slow2fast_keep(accuracy, 0.2, cfg).tolist() == [False, False, True, True, True, False]  # [0.3, 0.99]
    assert slow2fast_keep(accuracy, 0.5, cfg).tolist() == [False, True, True, True, False, False]  # [0.01, 0.7]


def test_dynamic_kl_weighs_each_groups_kl_tokens_by_its_coefficient():
    from workflow.algos.mix import ON_POLICY, MixedPolicy
    from workflow.config import RLConfig
    from workflow.engines.rl_batch import build_step_batch
    from workflow.engines.tiny_lm import TOKENIZER, build_model
    from workflow.config import ModelConfig
    model = build_model(ModelConfig(hidden=16, n_layers=1), TOKENIZER.vocab_size, 0)
    rl = RLConfig(group_size=2, prompts_per_step=2, dynamic_kl={"enabled": True})
    prompts = [TOKENIZER.encode("1+1="), TOKENIZER.encode("2+2=")]
    responses = [TOKENIZER.encode(r) for r in ("2", "3", "4", "44")]
    beta = np.array([0.002, 0.008])
    step = build_step_batch(model, model, MixedPolicy(), rl, prompts, [[], []], [ON_POLICY] * 4, responses,
                            [False] * 4, np.array([[1.0, 0.0], [1.0, 0.0]]), kl_coef=beta)
    ratio = (step.w_kl.sum(1) / step.w_pol.sum(1)).cpu()
    assert torch.allclose(ratio, torch.tensor([0.002, 0.002, 0.008, 0.008]))


# ------------------------------------------------------------------------------------ through the local engine
BASE = {"model": {"hidden": 32, "n_layers": 1}, "sft": {"enabled": False}}
RL = {"steps": 2, "prompts_per_step": 3, "group_size": 4, "checkpoint_every": 2, "max_new_tokens": 8}


def run_rl(tmp_path, rl: dict) -> list[dict]:
    cfg = RunConfig.model_validate({**BASE, "rl": {**RL, **rl}})
    rcfg = stage_config(cfg, "rl")
    run_id = stable_id(rcfg)
    run_stage("rl", "fast", run_id, rcfg, results_root=tmp_path)
    return query(f"SELECT * FROM train_steps WHERE run_id = '{run_id}' ORDER BY step", tmp_path).to_pylist()


def test_all_three_parts_train_on_the_local_engine_and_log_their_columns(tmp_path):
    rows = run_rl(tmp_path, {"thinking_reward": {"enabled": True}, "dynamic_kl": {"enabled": True},
                             "slow2fast": {"enabled": True, "slow": [0.0, 1.0], "fast": [0.0, 1.0]}})
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:  # bands [0, 1] keep every group: nothing refilled
        assert r["kept_groups"] == 3 and r["dropped_groups"] == 0 and r["extra_rollouts"] == 0
        assert r["rollouts"] == 12 and r["backward_passes"] == 1
        assert 0.001 <= r["kl_coef_mean"] <= 0.01 and r["kl"] is not None  # a reference model scores the batch
        assert r["thinking_bonus"] >= 0 and r["easy_frac"] + r["hard_frac"] == pytest.approx(1.0)
    method = query("SELECT method FROM runs", tmp_path).column(0).to_pylist()
    assert method == ["grpo+thinking_reward+dynamic_kl+slow2fast"]


def test_a_step_slow2fast_leaves_without_a_group_trains_nothing_and_says_so(tmp_path):
    """An untrained model solves nothing: accuracy 0 is outside the slow phase's [0.3, 0.99] in every round."""
    rows = run_rl(tmp_path, {"slow2fast": {"enabled": True, "max_rounds": 1}, "steps": 1})
    (r,) = rows
    assert r["kept_groups"] == 0 and r["dropped_groups"] == 6 and r["extra_rollouts"] == 12
    assert r["rollouts"] == 24 and r["backward_passes"] == 0 and r["optimizer_steps"] == 0
    assert r["loss"] is None and r["flops"] > 0 and r["reward"] == 0.0  # generation was paid for


def test_shrink_trains_on_the_groups_kept_without_sampling_more(tmp_path):
    (r,) = run_rl(tmp_path, {"slow2fast": {"enabled": True, "refill": "shrink", "slow": [0.0, 0.0]}, "steps": 1})
    assert r["kept_groups"] == 3 and r["extra_rollouts"] == 0 and r["backward_passes"] == 1


# ------------------------------------------------------------------------------------------ identity, refusals
def problems(cfg: dict) -> str:
    with pytest.raises(ValidationError) as e:
        RunConfig.model_validate(cfg)
    return "; ".join(format_validation_error(e.value))


def test_a_part_is_in_the_run_id_only_when_switched_on():
    plain = stage_config(RunConfig(), "rl")["rl"]
    assert not set(plain) & {"thinking_reward", "dynamic_kl", "slow2fast"}
    off = RunConfig.model_validate({"rl": {"slow2fast": {"switch": 0.7}}})  # settings of a part left off
    assert stable_id(stage_config(off, "rl")) == stable_id(stage_config(RunConfig(), "rl"))
    on = stage_config(RunConfig.model_validate({"rl": {"slow2fast": {"enabled": True}}}), "rl")["rl"]
    assert on["slow2fast"]["fast"] == [0.01, 0.7] and "dynamic_kl" not in on


def test_bad_settings_are_refused_naming_the_key(tmp_path):
    assert problems({"rl": {"thinking_reward": {"enabled": True, "pass_rate": "table"}}}).startswith(
        "rl.thinking_reward.table: required when pass_rate is 'table'")
    assert problems({"rl": {"thinking_reward": {"enabled": True, "complexity": "table",
                                                "table": str(tmp_path / "nope.jsonl")}}}).startswith(
        f"rl.thinking_reward.table: {tmp_path / 'nope.jsonl'}: no such file")
    assert problems({"rl": {"thinking_reward": {"scale": 1.5}}}).startswith("rl.thinking_reward.scale")
    assert problems({"rl": {"dynamic_kl": {"beta_min": 0.1, "beta_max": 0.01}}}).startswith(
        "rl.dynamic_kl.beta_min: 0.1 must be <= beta_max (0.01)")
    assert problems({"rl": {"dynamic_kl": {"enabled": True}, "kl_coef": 0.01}}).startswith(
        "rl.kl_coef: 0.01: with dynamic_kl each group's coefficient comes from its accuracy")
    assert problems({"rl": {"slow2fast": {"slow": [0.8, 0.2]}}}).startswith(
        "rl.slow2fast.slow: [0.8, 0.2]: accuracy bounds need 0 <= low <= high <= 1")
    assert problems({"rl": {"slow2fast": {"enabled": True}, "mix": "luffy"}}).startswith(
        "rl.slow2fast.enabled: FAST-GRPO's parts train on the policy's own groups")
    verl = {"name": "verl", "verl": {"model_path": "m"}}
    RunConfig.model_validate({"rl": {"slow2fast": {"enabled": True}}, "engine": verl})  # runs on verl too
    sampler = "trainer.v1.sampler.custom_sampler.name"
    assert problems({"rl": {"slow2fast": {"enabled": True}}, "engine": {**verl, "verl": {
        "model_path": "m", "overrides": {sampler: "Mine"}}}}).startswith(
        f"engine.verl.overrides.{sampler}: rlsweep sets it to 'Slow2FastSampler' for the method slow2fast (its verl "
        "adapter, workflow/methods/slow2fast/verl_adapter.py)")
    RunConfig.model_validate({"rl": {"slow2fast": {"enabled": True, "refill": "shrink"}}, "engine": {**verl, "verl": {
        "model_path": "m", "overrides": {sampler: "Mine"}}}})  # shrink: verl's own sampler, whichever it is
    assert problems({"rl": {"dynamic_kl": {"enabled": True}}, "engine": {**verl, "verl": {
        "model_path": "m", "overrides": {"actor_rollout_ref.actor.ppo_epochs": 2}}}}).startswith(
        "engine.verl.overrides.actor_rollout_ref.actor.ppo_epochs: 2: with rl.dynamic_kl it must be 1")


def test_the_ablation_sweep_is_grpo_each_part_alone_and_all_three():
    from collections import Counter
    from helpers import REPO
    from workflow.sweep.expand import load_sweep
    sweep = load_sweep(REPO / "sweeps" / "fast_grpo.yaml")
    assert Counter(r.method for r in sweep.runs) == {m: 3 for m in (
        "grpo", "grpo+thinking_reward", "grpo+dynamic_kl", "grpo+slow2fast",
        "grpo+thinking_reward+dynamic_kl+slow2fast")}
    assert len(sweep.jobs("sft")) == 1  # every setting starts from the same SFT checkpoint
