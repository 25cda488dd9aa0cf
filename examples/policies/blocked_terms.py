"""An example turngate policy: DENY a turn whose user messages name a blocked term.

It reads only what governance may read (the current intent and the INTENTs the client
referenced), uses no clock, randomness, file or network, and puts everything that changes its
answers in ``config()``: the terms are pinned, through the config digest, in every DECISION.
Changing the terms changes the digest, so the version must change too (a worker refuses to start
with a recorded id+version under another digest).

    TURNGATE_POLICY_MODULE=blocked_terms PYTHONPATH=examples/policies turngate worker
    PYTHONPATH=examples/policies turngate policy whatif --module blocked_terms
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from turngate.core.policy import PolicyDecision, PolicyInput

REASON_BLOCKED = "example.blocked_term"
REASON_CLEAN = "example.no_blocked_term"
DEFAULT_TERMS = ("password", "api key")


class BlockedTermsPolicy:
    policy_id = "example.blocked_terms"
    policy_version = "1"

    def __init__(self, terms: Iterable[str] = DEFAULT_TERMS) -> None:
        cleaned = sorted({term.strip().casefold() for term in terms if term.strip()})
        if not cleaned:
            raise ValueError("blocked_terms needs at least one non-empty term")
        self.terms = tuple(cleaned)

    def config(self) -> dict[str, Any]:
        return {"blocked_terms": list(self.terms)}

    def evaluate(self, policy_input: PolicyInput) -> PolicyDecision:
        messages = [policy_input.intent.message]
        messages += [item.message for item in policy_input.i_context if item.message is not None]
        for message in messages:
            text = message.casefold()
            if any(term in text for term in self.terms):
                return PolicyDecision.deny(REASON_BLOCKED)
        return PolicyDecision.allow(REASON_CLEAN)


POLICY = BlockedTermsPolicy()
