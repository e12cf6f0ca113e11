"""SRFT, the mixed-policy method `srft`: its settings `rl.srft` and its card; the algorithm is algorithm.py."""

from __future__ import annotations

from pydantic import Field, PositiveFloat

from workflow.methods.base import MIX_NUMBERS, Method, MethodSettings, numbers


class SRFTConfig(MethodSettings):
    """SRFT (Fu et al., arXiv:2506.19767): one batch; SFT loss on every prompt's demonstration weighted
    sft_coef x sg(exp(-H_demo)); the demonstration also in the group as an off-policy trace (shaped loss, lam);
    correct rollouts weighted rl_coef x sg(exp(H)), wrong ones -1 (workflow/methods/srft/algorithm.py)."""

    sft_coef: PositiveFloat = Field(0.5, description=(
        "Weight of the SFT loss on every prompt's demonstration (x sg(exp(-H_demo)))."))
    rl_coef: PositiveFloat = Field(0.1, description=(
        "Weight of correct rollouts' loss (x sg(exp(H))); wrong rollouts weigh -1."))
    lam: PositiveFloat = Field(0.1, description=(
        "Policy shaping of the demonstration as an off-policy trace in its group: f(pi) = pi / (pi + lam)."))


METHOD = Method("mix", algorithm="workflow.methods.srft.algorithm:SRFT", settings=SRFTConfig, headline="sft_loss_share",
                numbers=MIX_NUMBERS + numbers(
                    ("rl_weight", "float", "mean RL weight of the correct rollouts (null: no correct rollout)")))
