"""FAST-GRPO's thinking reward, the part `thinking_reward` (workflow/algos/fast_grpo.py): its settings
`rl.thinking_reward` and its card; the bonus is computed in algorithm.py."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from workflow.methods.base import Method, PartSettings, numbers
from workflow.strict import ConfigProblem


class ThinkingRewardConfig(PartSettings):
    """The thinking reward: a correct answer to an easy prompt earns scale x g(1 - L / max_new_tokens), a wrong
    answer to a hard prompt scale x g(L / max_new_tokens); difficulty = (1 - pass rate) x normalised complexity,
    easy = at or below its `percentile`-th value over the step's prompts. Estimates online from the group or from
    `table` (JSONL rows {prompt, pass_rate, complexity})."""

    percentile: float = Field(80.0, gt=0.0, lt=100.0, description=(
        "A prompt is easy when its difficulty is at or below this percentile of the step's prompts."))
    scale: float = Field(0.5, gt=0.0, lt=1.0, description=(
        "The bonus's scale: a correct answer to an easy prompt earns scale x g(1 - L / max_new_tokens), a wrong answer"
        " to a hard one scale x g(L / max_new_tokens). Below 1, so a wrong answer never outscores a right one."))
    shape: Literal["linear", "cosine"] = Field("linear", description="g: linear or cosine.")
    pass_rate: Literal["group", "table"] = Field("group", description=(
        "Where a prompt's pass rate comes from: its group (online) or `table`."))
    complexity: Literal["response_len", "prompt_len", "table"] = Field("response_len", description=(
        "Where a prompt's complexity comes from: the responses' length, the prompt's length, or `table`."))
    table: str | None = Field(None, description=(
        "A JSONL file of rows {prompt, pass_rate, complexity}; required when pass_rate or complexity is table."))

    @model_validator(mode="after")
    def _table_when_read(self) -> "ThinkingRewardConfig":
        reads = [k for k in ("pass_rate", "complexity") if getattr(self, k) == "table"]
        if reads and not self.table:
            raise ConfigProblem("table", f"required when {' and '.join(reads)} is 'table' (a JSONL file of rows "
                                "{prompt, pass_rate, complexity})")
        if self.table and not reads:
            raise ConfigProblem("table", "is read only when pass_rate or complexity is 'table'")
        if self.table and self.enabled and not Path(self.table).is_file():
            raise ConfigProblem("table", f"{self.table}: no such file")
        return self


METHOD = Method("part", algorithm="workflow.methods.thinking_reward.algorithm:ThinkingReward",
                settings=ThinkingRewardConfig, headline="thinking_bonus", numbers=numbers(
                    ("thinking_bonus", "float", "mean thinking bonus added to the responses' rewards"),
                    ("easy_frac", "float", "share of the step's prompts judged easy"),
                    ("hard_frac", "float", "share of the step's prompts judged hard")))
