"""GRPO's step as an update rule: one backward pass, one optimizer step, on-policy; no settings."""

from __future__ import annotations

from workflow.methods.base import Method


METHOD = Method("update", algorithm="workflow.methods.grpo.algorithm:GRPOStep")
