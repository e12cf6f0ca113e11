"""SRFT, the mixed-policy method `srft`: its settings `rl.srft` and its card; the algorithm is algorithm.py."""

from __future__ import annotations

from pydantic import PositiveFloat

from workflow.methods.base import Method, MethodSettings


class SRFTConfig(MethodSettings):
    """SRFT (Fu et al., arXiv:2506.19767): one batch; SFT loss on every prompt's demonstration weighted
    sft_coef x sg(exp(-H_demo)); the demonstration also in the group as an off-policy trace (shaped loss, lam);
    correct rollouts weighted rl_coef x sg(exp(H)), wrong ones -1 (workflow/methods/srft/algorithm.py)."""

    sft_coef: PositiveFloat = 0.5
    rl_coef: PositiveFloat = 0.1
    lam: PositiveFloat = 0.1


METHOD = Method("mix", algorithm="workflow.methods.srft.algorithm:SRFT", settings=SRFTConfig)
