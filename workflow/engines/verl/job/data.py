"""The data a verl run reads, as verl's parquet files (the reward verl calls on it: rollout/reward.py).

verl's RLHFDataset reads rows `{data_source, prompt: [chat messages], ability, reward_model: {style, ground_truth},
extra_info}` (it applies the model's chat template itself) and its reward loop calls
`reward.custom_reward_function` = `compute_score(data_source, solution_str, ground_truth, extra_info)` for every
response. SFT rows are `{messages: [prompt turns..., assistant demonstration]}` (verl's MultiTurnSFTDataset puts the
loss on the assistant turn). `cfg` below is a stage's typed config (workflow/stages.py).

- arithmetic task: training problems are drawn exactly as the local engine draws them (step t's batch from the
  generator seeded by (seed, t, 1); SFT's from (sft.seed, t)); reward = the task's exact \\boxed{} match.
- datasets task: the data stage's prepared rows (workflow/data/prepare.py), in epochs (a permutation per epoch
  seeded by (seed, epoch)), each problem put to the model by `task.template` (workflow/benchmarks/prompts.py: boxed, or the
  seed-003 system prompt); SFT trains on the rows' demonstrations; reward = the eval scorer (last \\boxed{}
  compared with the gold by math-verify, in a worker process with a time limit).
`rl.steps x rl.prompts_per_step` rows in order, so verl (with shuffle off) sees the same problems in the same steps
(with Slow2Fast's resample, rows for its refills after them: rl_prompt_count).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from workflow.algos.part import refill_rounds
from workflow.benchmarks.prompts import messages
from workflow.results.writer import write_parquet
from workflow.benchmarks.arithmetic import sample_train, split
from workflow.engines.verl.contract import DATA_SOURCE, MATH_SOURCE
from workflow.methods.registry import build_parts

VAL_ROWS = 64  # verl reads a validation file even with validation off (test_freq -1); a few rows do


def _row(source: str, turns: list[dict], answer: str, split_name: str, index: int, step: int | None, **info) -> dict:
    return {"data_source": source, "prompt": turns, "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split_name, "index": index, "step": step, **info}}


def epoch_order(n: int, seed: int, count: int, stream: int) -> list[int]:
    """`count` row indices in epochs: each epoch a permutation of range(n) seeded by (seed, epoch, stream)."""
    order: list[int] = []
    epoch = 0
    while len(order) < count:
        order += np.random.default_rng([seed, epoch, stream]).permutation(n).tolist()
        epoch += 1
    return order[:count]


def read_rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def rl_prompt_count(rl) -> int:
    """How many prompts a run may draw from its data stream: one batch a step, and with Slow2Fast's resample as many
    refill prompts as its budget allows (max_rounds x prompts_per_step a step, workflow/methods/slow2fast/verl.py). verl refills from the
    same stream, so a step after a refill starts further on in it; the rows are there so that it never wraps round
    to the first step's problems."""
    rounds = 1 + refill_rounds(build_parts(rl))
    return rl.steps * rl.prompts_per_step * rounds


def rl_rows(cfg, data: Path | None = None) -> list[dict]:
    """With a mixed-policy method (rl.mix), each row's extra_info carries its demonstration (`demo`: the worked
    solution, or the prepared row's solution), which verl's dataset hands through to the driver's mix hooks."""
    rl, rows = cfg.rl, []
    demo = rl.mix != "none"
    if cfg.task.name == "arithmetic":  # (the refill rows are drawn as further steps would be)
        for step in range(rl_prompt_count(rl) // rl.prompts_per_step):
            for p in sample_train(cfg.task, np.random.default_rng([cfg.seed, step, 1]), rl.prompts_per_step):
                rows.append(_row(DATA_SOURCE, [{"role": "user", "content": p.prompt}], p.answer, "train", len(rows),
                                 step, **({"demo": p.solution} if demo else {})))
        return rows
    prepared = read_rows(data)
    for i, k in enumerate(epoch_order(len(prepared), cfg.seed, rl_prompt_count(rl), 1)):
        r = prepared[k]
        rows.append(_row(MATH_SOURCE, messages(r["problem"], cfg.task.template), r["answer"], "train", i,
                         i // rl.prompts_per_step, id=r["id"], **({"demo": r["solution"] or ""} if demo else {})))
    return rows


def val_rows(cfg, data: Path | None = None) -> list[dict]:
    if cfg.task.name == "arithmetic":
        return [_row(DATA_SOURCE, [{"role": "user", "content": p.prompt}], p.answer, "test", i, None)
                for i, p in enumerate(split(cfg.task).heldout)]
    return [_row(MATH_SOURCE, messages(r["problem"], cfg.task.template), r["answer"], "test", i, None, id=r["id"])
            for i, r in enumerate(read_rows(data)[:VAL_ROWS])]


def write_rl_data(cfg, out_dir: Path, data: Path | None = None) -> tuple[Path, Path]:
    """train.parquet and val.parquet in verl's format under out_dir (atomic writes; rewritten identically).
    `data`: the prepared rows of a datasets task."""
    out_dir = Path(out_dir)
    train = write_parquet(pa.Table.from_pylist(rl_rows(cfg, data)), out_dir / "train.parquet")
    val = write_parquet(pa.Table.from_pylist(val_rows(cfg, data)), out_dir / "val.parquet")
    return train, val


def sft_rows(cfg, data: Path | None = None) -> list[dict]:
    sft, rows = cfg.sft, []
    if cfg.task.name == "arithmetic":
        for step in range(sft.steps):
            for p in sample_train(cfg.task, np.random.default_rng([sft.seed, step]), sft.batch_size):
                rows.append({"messages": [{"role": "user", "content": p.prompt},
                                          {"role": "assistant", "content": p.solution}]})
        return rows
    demos = [r for r in read_rows(data) if r["solution"]]
    if not demos:
        raise ValueError("the prepared training data has no demonstrations for SFT")
    for k in epoch_order(len(demos), sft.seed, sft.steps * sft.batch_size, 2):
        r = demos[k]
        rows.append({"messages": [*messages(r["problem"], cfg.task.template),
                                  {"role": "assistant", "content": r["solution"]}]})
    return rows


def write_sft_data(cfg, out_dir: Path, data: Path | None = None, limit: int | None = None) -> Path:
    """sft.parquet in verl's multi-turn SFT format under out_dir (sft.steps x sft.batch_size examples, or the first
    `limit` of them: the integrity preflight's batch)."""
    return write_parquet(pa.Table.from_pylist(sft_rows(cfg, data)[:limit]), Path(out_dir) / "sft.parquet")
