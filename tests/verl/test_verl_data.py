"""The data-prep rule's parquet and the reward, read the way verl reads them (RLHFDataset with a real HF
tokenizer, the reward loaded through reward.custom_reward_function)."""

from __future__ import annotations

import pytest

from helpers import need

need("verl")

import numpy as np  # noqa: E402

from verl_cpu import write_tiny_model  # noqa: E402
from workflow.config import RunConfig  # noqa: E402
from workflow.engines.verl.job.compose import compose  # noqa: E402
from workflow.engines.verl.job.translate import translate  # noqa: E402
from workflow.engines.verl.job.data import read_rows, write_rl_data  # noqa: E402
from workflow.engines.verl.rollout.reward import compute_score  # noqa: E402
from workflow.benchmarks.arithmetic import sample_train  # noqa: E402

pytestmark = pytest.mark.serial("verl")  # README "Tests": one at a time with the other verl modules

CFG = RunConfig.model_validate({"engine": {"name": "verl", "verl": {"max_prompt_length": 64, "model_path": "m"}},
                                "sft": {"enabled": False}, "seed": 3,
                                "task": {"n_heldout": 16},
                                "rl": {"steps": 3, "prompts_per_step": 4, "group_size": 2, "max_new_tokens": 16}})


def test_rl_data_is_the_local_engines_problems_in_step_order_and_verl_loads_it(tmp_path):
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset
    train, val = write_rl_data(CFG, tmp_path)
    rows = read_rows(train)
    want = [p for step in range(3) for p in sample_train(CFG.task, np.random.default_rng([3, step, 1]), 4)]
    assert [r["prompt"][0]["content"] for r in rows] == [p.prompt for p in want]
    assert [r["reward_model"]["ground_truth"] for r in rows] == [p.answer for p in want]
    assert [r["extra_info"]["step"] for r in rows] == [0] * 4 + [1] * 4 + [2] * 4
    assert len(read_rows(val)) == 16
    assert write_rl_data(CFG, tmp_path) and read_rows(train) == rows  # rewritten identically

    model = write_tiny_model(tmp_path / "model")
    config = compose(translate(CFG, model_path=str(model), train_files=str(train), val_files=str(val)))
    tokenizer = AutoTokenizer.from_pretrained(model)
    ds = RLHFDataset(data_files=[str(train)], tokenizer=tokenizer, config=config.data)
    assert len(ds) == 12
    item = ds[5]
    assert item["raw_prompt"][0]["content"] == want[5].prompt


def test_slow2fast_resample_runs_get_rows_for_their_refills_after_the_steps_batches(tmp_path):
    cfg = CFG.model_copy(update={"rl": CFG.rl.model_copy(update={"slow2fast": CFG.rl.slow2fast.model_copy(
        update={"enabled": True, "max_rounds": 2})})})
    rows = read_rows(write_rl_data(cfg, tmp_path)[0])
    plain = read_rows(write_rl_data(CFG, tmp_path / "plain")[0])
    assert len(rows) == 3 * 4 * (1 + 2) and rows[:12] == plain  # the steps' batches first, as without it
    assert len({r["prompt"][0]["content"] for r in rows}) > 12  # fresh problems for the refills
    shrink = cfg.rl.slow2fast.model_copy(update={"refill": "shrink"})
    cfg = cfg.model_copy(update={"rl": cfg.rl.model_copy(update={"slow2fast": shrink})})
    assert read_rows(write_rl_data(cfg, tmp_path / "shrink")[0]) == plain  # shrink never refills


def test_reward_is_loaded_by_verl_and_scores_the_boxed_answer():
    from verl.trainer.ppo.reward import get_custom_reward_fn
    fn = get_custom_reward_fn(compose(translate(CFG)))
    assert fn(data_source="rlsweep/arithmetic", solution_str="17*5=85\\boxed{85}", ground_truth="85",
              extra_info={}) == 1.0
    assert fn(data_source="rlsweep/arithmetic", solution_str="\\boxed{84}", ground_truth="85", extra_info={}) == 0.0
    assert compute_score("rlsweep/arithmetic", "85", "85") == 0.0  # no \boxed{}: wrong
    with pytest.raises(ValueError, match="no reward for data source"):
        compute_score("openai/gsm8k", "\\boxed{1}", "1")
