"""A policy that raises: its DENY (``policy.evaluation_error``) is a fault with snapshots."""

from __future__ import annotations

from typing import Any

from turngate.core.policy import PolicyDecision, PolicyInput


class RaisingPolicy:
    policy_id = "tests.raising"
    policy_version = "1"

    def config(self) -> dict[str, Any]:
        return {}

    def evaluate(self, policy_input: PolicyInput) -> PolicyDecision:
        raise RuntimeError("the policy's lookup table is missing")


POLICY = RaisingPolicy()
