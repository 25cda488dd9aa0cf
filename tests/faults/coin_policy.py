"""A policy that is not deterministic (it tosses a coin and reads the clock): the fault suite's
example of what a policy must never do."""

from __future__ import annotations

import random
import time
from typing import Any

from turngate.core.policy import PolicyDecision, PolicyInput


class CoinPolicy:
    policy_id = "tests.coin"
    policy_version = "1"

    def config(self) -> dict[str, Any]:
        return {}

    def evaluate(self, policy_input: PolicyInput) -> PolicyDecision:
        if random.getrandbits(1) ^ (time.time_ns() >> 10 & 1):
            return PolicyDecision.allow("coin.heads")
        return PolicyDecision.deny("coin.tails")


POLICY = CoinPolicy()
