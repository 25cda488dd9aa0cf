"""At most N user messages per conversation (the context system's second example).

The policy counts the user messages it can see: every referenced INTENT in I_context that
carries a message, plus the current one. More than N -> DENY
``policy.max_user_messages_exceeded``; otherwise ALLOW ``policy.max_user_messages_within_limit``.
It only sees what the client declared: a client that references fewer turns is counted on those.

N comes from ``TURNGATE_POLICY_MAX_USER_MESSAGES`` (default 5), read once when the module is
imported; it is part of :meth:`MaxUserMessagesPolicy.config`, so it is pinned in the policy's
config digest in every DECISION.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from turngate.core.policy import PolicyDecision, PolicyInput

ENV_VAR = "TURNGATE_POLICY_MAX_USER_MESSAGES"
DEFAULT_LIMIT = 5
REASON_EXCEEDED = "policy.max_user_messages_exceeded"
REASON_WITHIN = "policy.max_user_messages_within_limit"


def limit_from_env(env: Mapping[str, str]) -> int:
    raw = env.get(ENV_VAR, "").strip()
    if not raw:
        return DEFAULT_LIMIT
    try:
        limit = int(raw, 10)
    except ValueError as exc:
        raise ValueError(f"{ENV_VAR}={raw!r} is not an integer") from exc
    if limit < 1:
        raise ValueError(f"{ENV_VAR}={raw!r} must be at least 1")
    return limit


class MaxUserMessagesPolicy:
    policy_id = "turngate.max_user_messages"
    policy_version = "1"

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"max_user_messages must be an integer >= 1, got {limit!r}")
        self.limit = limit

    def config(self) -> dict[str, Any]:
        return {"max_user_messages": self.limit}

    def evaluate(self, policy_input: PolicyInput) -> PolicyDecision:
        prior = sum(1 for item in policy_input.i_context if item.message is not None)
        if prior + 1 > self.limit:
            return PolicyDecision.deny(REASON_EXCEEDED)
        return PolicyDecision.allow(REASON_WITHIN)


POLICY = MaxUserMessagesPolicy(limit_from_env(os.environ))
policy = POLICY  # DBL_GATEWAY_POLICY_OBJECT=policy
