"""HPT, the mixed-policy method `hpt`: its settings `rl.hpt` and its card; the algorithm is algorithm.py."""

from __future__ import annotations

from pydantic import Field, PositiveFloat

from workflow.methods.base import Method, MethodSettings


class HPTConfig(MethodSettings):
    """HPT (Lv et al., arXiv:2509.04419): per prompt, the SFT loss on its demonstration when at most `threshold` of
    its rollouts are correct (0: all wrong), the GRPO loss on its rollouts otherwise."""

    threshold: int = Field(0, ge=0)
    sft_coef: PositiveFloat = 1.0


METHOD = Method("mix", algorithm="workflow.methods.hpt.algorithm:HPT", settings=HPTConfig)
