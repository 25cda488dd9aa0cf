"""Deny every intent (reason ``policy.deny_all``)."""

from __future__ import annotations

from typing import Any

from turngate.core.policy import PolicyDecision, PolicyInput

REASON = "policy.deny_all"


class DenyAllPolicy:
    policy_id = "turngate.deny_all"
    policy_version = "1"

    def config(self) -> dict[str, Any]:
        return {}

    def evaluate(self, policy_input: PolicyInput) -> PolicyDecision:
        return PolicyDecision.deny(REASON)


POLICY = DenyAllPolicy()
policy = POLICY  # DBL_GATEWAY_POLICY_OBJECT=policy
