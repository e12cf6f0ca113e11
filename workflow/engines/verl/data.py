"""The data a verl run reads: our task's problems as verl's RLHF parquet, and the reward verl calls; for SFT, the
worked solutions as verl's multi-turn SFT parquet. (`cfg` below: a stage's typed config, workflow/stages.py.)

verl's RLHFDataset reads rows `{data_source, prompt: [chat messages], ability, reward_model: {style, ground_truth},
extra_info}` and its reward loop calls `reward.custom_reward_function` = `compute_score(data_source, solution_str,
ground_truth, extra_info)` for every response. Training problems are drawn exactly as the local engine draws them
(step t's batch from the generator seeded by (seed, t, 1)), one row per prompt, `rl.steps x rl.prompts_per_step`
rows in order, so verl (with shuffle off) sees the same problems in the same steps. SFT rows are
`{messages: [user prompt, assistant solution]}` (verl's MultiTurnSFTDataset puts the loss on the assistant turn),
step t's batch from the generator seeded by (sft.seed, t) as the local engine's SFT draws it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from workflow.config import TaskConfig
from workflow.results.writer import write_parquet
from workflow.tasks.arithmetic import reward, sample_train, split

DATA_SOURCE = "rlsweep/arithmetic"


def _row(prompt: str, answer: str, split_name: str, index: int, step: int | None) -> dict:
    return {"data_source": DATA_SOURCE, "prompt": [{"role": "user", "content": prompt}], "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split_name, "index": index, "step": step}}


def rl_rows(cfg) -> list[dict]:
    rl, rows = cfg.rl, []
    for step in range(rl.steps):
        for p in sample_train(cfg.task, np.random.default_rng([cfg.seed, step, 1]), rl.prompts_per_step):
            rows.append(_row(p.prompt, p.answer, "train", len(rows), step))
    return rows


def heldout_rows(task: TaskConfig) -> list[dict]:
    return [_row(p.prompt, p.answer, "test", i, None) for i, p in enumerate(split(task).heldout)]


def write_rl_data(cfg, out_dir: Path) -> tuple[Path, Path]:
    """train.parquet and val.parquet in verl's format under out_dir (atomic writes; rewritten identically)."""
    out_dir = Path(out_dir)
    train = write_parquet(pa.Table.from_pylist(rl_rows(cfg)), out_dir / "train.parquet")
    val = write_parquet(pa.Table.from_pylist(heldout_rows(cfg.task)), out_dir / "val.parquet")
    return train, val


def sft_rows(cfg) -> list[dict]:
    sft, rows = cfg.sft, []
    for step in range(sft.steps):
        for p in sample_train(cfg.task, np.random.default_rng([sft.seed, step]), sft.batch_size):
            rows.append({"messages": [{"role": "user", "content": p.prompt},
                                      {"role": "assistant", "content": p.solution}]})
    return rows


def write_sft_data(cfg, out_dir: Path) -> Path:
    """sft.parquet in verl's multi-turn SFT format under out_dir (sft.steps x sft.batch_size examples)."""
    return write_parquet(pa.Table.from_pylist(sft_rows(cfg)), Path(out_dir) / "sft.parquet")


def read_rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                  **_: object) -> float:
    """verl's reward hook (translate.REWARD_FN): the task's own reward, as the local engine rewards."""
    if data_source != DATA_SOURCE:
        raise ValueError(f"no reward for data source {data_source!r} (this run's data is {DATA_SOURCE!r})")
    return reward(solution_str, str(ground_truth))
