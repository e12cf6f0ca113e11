"""Seeded rollouts: verl's single-turn agent loop with each request's vLLM sampling seed set from the run's seed,
the step, the row and the session (contract.rollout_seed), registered in verl's agent-loop registry as the run's
rollout.agent.default_agent_loop (translate.py). Runs in verl's agent-loop workers, which import it through
VERL_USE_EXTERNAL_MODULES. A method with its own loop seeds its requests the same way (Prefix-RFT's,
workflow/methods/prefix_rft/verl.py)."""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from workflow.engines.verl.contract import SEEDED_AGENT_LOOP, seeded


@register(SEEDED_AGENT_LOOP)
class SeededAgentLoop(SingleTurnAgentLoop):
    async def run(self, sampling_params: dict[str, Any], **kwargs):
        return await super().run(seeded(sampling_params, self.config, kwargs), **kwargs)
