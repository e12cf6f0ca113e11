"""Prefix-RFT on verl (workflow/engines/verl/adapters.py): every training rollout goes through Prefix-RFT's agent
loop (verl.py here, which registers itself in each verl process under AGENT_LOOP)."""

from __future__ import annotations

from workflow.engines.verl.adapters import VerlAdapter

AGENT_LOOP = "rlsweep_prefix_rft"  # its name in verl's agent-loop registry: the run's rollout.agent.default_agent_loop

ADAPTER = VerlAdapter(keys=lambda cfg: {"actor_rollout_ref.rollout.agent.default_agent_loop": AGENT_LOOP},
                      modules=("workflow.methods.prefix_rft.verl",))
