"""Prefix-RFT's rollouts inside verl 0.9's generation: an agent loop, registered in verl's agent-loop registry as
verl_adapter.AGENT_LOOP (the run's rollout.agent.default_agent_loop), that is verl's own
single-turn loop with one change. For a session the method's slot prefixes (mix_batch.prompt_slots: the same draw as the driver's), the
LLM server is asked to continue prompt + the demonstration's first k tokens, and the k tokens are put in front of
what it generated: the response is prefix + continuation, at most rollout.response_length tokens, scored as a whole
by verl's reward loop, every token in the response mask (the driver marks the first k off-policy, workflow/engines/verl/controller/mix_hooks.py).
Every other session, and every row without a demonstration, is verl's single-turn loop unchanged.

This is Prefix-RFT's verl half, beside its card (its verl adapter, verl_adapter.py, names this module): a run that selects
prefix_rft has it imported in each Ray process of its verl run (VERL_USE_EXTERNAL_MODULES), which is what registers
the loop where verl's agent-loop workers look it up. It meets the engine only through
workflow/engines/verl/contract.py.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from workflow.algos.mix_batch import prefix_len, prompt_slots
from workflow.engines.verl.contract import run_rl, seeded
from workflow.methods.prefix_rft.verl_adapter import AGENT_LOOP
from workflow.methods.registry import build_mix


class PrefixedServer:
    """verl's LLM-server client, continuing `prefix` after the prompt: generates at most `budget` - k tokens (at
    least one) and returns prefix + continuation as the generated tokens (rollout log-probs 0 on the prefix: the
    policy did not sample it). Everything else is the wrapped client's."""

    def __init__(self, server, prefix: list[int], budget: int):
        self.server, self.prefix, self.budget = server, list(prefix), budget

    async def generate(self, *, prompt_ids, sampling_params: dict[str, Any], **kwargs):
        k = len(self.prefix)
        params = {**sampling_params, "max_tokens": max(1, self.budget - k)}
        out = await self.server.generate(prompt_ids=list(prompt_ids) + self.prefix, sampling_params=params, **kwargs)
        log_probs = [0.0] * k + list(out.log_probs) if out.log_probs else out.log_probs
        return out.model_copy(update={"token_ids": self.prefix + list(out.token_ids), "log_probs": log_probs})

    def __getattr__(self, name):
        return getattr(self.server, name)


def session_prefix(trainer_config, tokenizer, session_id: int, extra_info: dict | None, step: int,
                   response_length: int) -> list[int]:
    """The demonstration tokens session `session_id` of this prompt starts with ([] for an on-policy session or a
    row without a demonstration). `trainer_config` is the run's verl config: the run's RL config is the one the
    driver builds its method from (contract.run_rl), the seed data.seed."""
    demo = (extra_info or {}).get("demo")
    if not demo:
        return []
    rl = run_rl(trainer_config.trainer.v1.rlsweep)
    tokens = tokenizer.encode(demo, add_special_tokens=False)
    slots = prompt_slots(build_mix(rl), rl.group_size, rl.steps, len(tokens), int(trainer_config.data.seed),
                         int(step), int(extra_info["index"]))
    slot = slots[session_id]
    return tokens[: prefix_len(slot, response_length)] if slot.generate and slot.prefix else []


@register(AGENT_LOOP)
class PrefixAgentLoop(SingleTurnAgentLoop):
    async def run(self, sampling_params: dict[str, Any], **kwargs):
        prefix = session_prefix(self.config, self.tokenizer, int(kwargs["session_id"]), kwargs.get("extra_info"),
                                kwargs["global_steps"], self.response_length)
        if prefix:  # this loop object serves one session (verl builds one per call)
            self.server_manager = PrefixedServer(self.server_manager, prefix, self.response_length)
        # seeded as every rollout of a verl run (contract.rollout_seed; the default loop: workflow/engines/verl/rollout/agent_loop.py)
        return await super().run(seeded(sampling_params, self.config, kwargs), **kwargs)
