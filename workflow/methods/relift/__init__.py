"""ReLIFT, the mixed-policy method `relift`: its settings `rl.relift` and its card; the algorithm is algorithm.py."""

from __future__ import annotations

from pydantic import Field, PositiveFloat, PositiveInt

from workflow.methods.base import MIX_NUMBERS, Method, MethodSettings, numbers


class ReLIFTConfig(MethodSettings):
    """ReLIFT (Ma et al., arXiv:2506.07527): prompts that no rollout solved go into a buffer; when it holds
    `buffer_size` of them (or every `every` steps, if set, whatever it holds) one SFT step on (at most buffer_size
    of) their demonstrations is interleaved after the RL step. The paper's runs: 128."""

    buffer_size: PositiveInt = Field(16, description=(
        "Prompts no rollout solved are buffered; when the buffer holds this many, one SFT step on their demonstrations"
        " follows the RL step (the paper's runs: 128)."))
    every: PositiveInt | None = Field(None, description=(
        "Also take the SFT step every this many steps with whatever the buffer holds; null: only when it is full."))
    lr_scale: PositiveFloat = Field(1.0, description="The SFT step's learning rate: rl.lr x lr_scale.")


METHOD = Method("mix", algorithm="workflow.methods.relift.algorithm:ReLIFT", settings=ReLIFTConfig,
                headline="buffer_size",
                numbers=MIX_NUMBERS + numbers(
    ("buffer_size", "int", "hard prompts' demonstrations waiting in the buffer after the step"),
    ("interleaved_sft_rows", "int", "demonstrations the step's interleaved SFT update trained on (null: none)"),
    ("interleaved_sft_loss", "float", "loss of the interleaved SFT update (null: none)")))
