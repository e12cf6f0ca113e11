"""`rl.mix: none`, plain on-policy RL (no demonstrations): the default mixed-policy method; no settings."""

from __future__ import annotations

from workflow.methods.base import Method


METHOD = Method("mix", algorithm="workflow.methods.on_policy.algorithm:OnPolicy")
