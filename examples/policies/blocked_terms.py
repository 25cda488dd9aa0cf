"""An example turngate policy: DENY a turn whose user messages name a blocked term.

It reads only what governance may read (the current intent and the INTENTs the client
referenced), uses no clock, randomness, file or network, and puts everything that changes its
answers in ``config()``: the terms are pinned, through the config digest, in every DECISION.
Changing the terms changes the digest, so the version must change too (a worker refuses to start
with a recorded id+version under another digest).

    TURNGATE_POLICY_MODULE=blocked_terms PYTHONPATH=examples/policies turngate worker
    PYTHONPATH=examples/policies turngate policy whatif --module blocked_terms

The terms come from ``TURNGATE_BLOCKED_TERMS`` (comma-separated), read once at import. Besides
the message and the referenced INTENTs it reads ``inputs.client_context``: the system message
and unmatched history an OpenAI-style client sent along.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from turngate.core.policy import PolicyDecision, PolicyInput

REASON_BLOCKED = "example.blocked_term"
REASON_CLEAN = "example.no_blocked_term"
DEFAULT_TERMS = ("password", "api key")
ENV_VAR = "TURNGATE_BLOCKED_TERMS"


def terms_from_env(raw: str | None) -> tuple[str, ...]:
    """Comma-separated, compared case-insensitively; unset means the defaults."""
    if raw is None:
        return DEFAULT_TERMS
    return tuple(term.strip().casefold() for term in raw.split(",") if term.strip())


def texts_of(policy_input: PolicyInput) -> Iterator[str]:
    """Every text of this turn that a policy can see: the message, what an OpenAI-style client
    sent along (``inputs.client_context``), and the referenced INTENTs' messages."""
    yield policy_input.intent.message
    context = policy_input.intent.inputs.get("client_context") or {}
    for message in context.get("messages") or []:
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            yield message["content"]
    for item in policy_input.i_context:
        if item.message is not None:
            yield item.message


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
        for message in texts_of(policy_input):
            text = message.casefold()
            if any(term in text for term in self.terms):
                return PolicyDecision.deny(REASON_BLOCKED)
        return PolicyDecision.allow(REASON_CLEAN)


# Read once, when the worker imports the module.
POLICY = BlockedTermsPolicy(terms_from_env(os.environ.get(ENV_VAR)))
