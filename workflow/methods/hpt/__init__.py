"""HPT, the mixed-policy method `hpt`: its settings `rl.hpt` and its card; the algorithm is algorithm.py."""

from __future__ import annotations

from pydantic import Field, PositiveFloat

from workflow.methods.base import MIX_NUMBERS, Method, MethodSettings, numbers


class HPTConfig(MethodSettings):
    """HPT (Lv et al., arXiv:2509.04419): per prompt, the SFT loss on its demonstration when at most `threshold` of
    its rollouts are correct (0: all wrong), the GRPO loss on its rollouts otherwise."""

    threshold: int = Field(0, ge=0, description=(
        "A prompt with at most this many correct rollouts trains on its demonstration (SFT loss); the others on their "
        "rollouts (GRPO loss). 0: only prompts with all rollouts wrong."))
    sft_coef: PositiveFloat = Field(1.0, description="Weight of the SFT loss.")


METHOD = Method("mix", algorithm="workflow.methods.hpt.algorithm:HPT", settings=HPTConfig, headline="sft_prompt_frac",
                numbers=MIX_NUMBERS + numbers(
                    ("sft_prompt_frac", "float", "share of the step's prompts switched to SFT")))
