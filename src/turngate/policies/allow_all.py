"""Allow every intent (reason ``policy.allow_all``). For development and demos."""

from __future__ import annotations

from typing import Any

from turngate.core.policy import PolicyDecision, PolicyInput

REASON = "policy.allow_all"


class AllowAllPolicy:
    policy_id = "turngate.allow_all"
    policy_version = "1"

    def config(self) -> dict[str, Any]:
        return {}

    def evaluate(self, policy_input: PolicyInput) -> PolicyDecision:
        return PolicyDecision.allow(REASON)


POLICY = AllowAllPolicy()
policy = POLICY  # DBL_GATEWAY_POLICY_OBJECT=policy
