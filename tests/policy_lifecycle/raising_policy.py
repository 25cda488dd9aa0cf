"""A candidate policy that raises on one turn (the third) and otherwise agrees with allow_all."""

from __future__ import annotations

from typing import Any

from turngate.core.policy import PolicyDecision, PolicyInput


class RaisesOnTurnThree:
    policy_id = "tests.raises_on_turn_three"
    policy_version = "1"

    def config(self) -> dict[str, Any]:
        return {}

    def evaluate(self, policy_input: PolicyInput) -> PolicyDecision:
        if policy_input.intent.turn_id == "c-3":
            raise ValueError("cannot decide turn c-3")
        return PolicyDecision.allow("policy.allow_all")


POLICY = RaisesOnTurnThree()
