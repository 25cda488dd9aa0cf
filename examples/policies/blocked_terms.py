"""An example policy: DENY a turn whose message, or any message the client sent along with it,
contains a blocked term; ALLOW everything else.

Run it (from the repository root):

    PYTHONPATH=examples/policies TURNGATE_POLICY_MODULE=blocked_terms \
    TURNGATE_BLOCKED_TERMS="password,api key" .venv/bin/turngate dev

What it reads is all a policy may read (``PolicyInput``): the current intent (``message``,
``inputs`` -- including ``inputs.client_context``, the system message and unmatched history an
OpenAI-style client sent -- the identity, the requested model) and ``i_context``, the INTENTs of
the turns the client declared as refs. Never an answer (EXECUTION output), never the clock, a
file or the network: the same input must give the same decision when `turngate replay` runs it
again months later.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from turngate.core.policy import PolicyDecision, PolicyInput

ENV_VAR = "TURNGATE_BLOCKED_TERMS"
DEFAULT_TERMS = ("password", "api key")


def terms_from_env(raw: str | None) -> tuple[str, ...]:
    """Comma-separated, compared case-insensitively; unset means the defaults."""
    if raw is None:
        return DEFAULT_TERMS
    return tuple(term.strip().casefold() for term in raw.split(",") if term.strip())


def texts_of(policy_input: PolicyInput) -> Iterator[str]:
    """Every text this turn would put in front of the model that a policy can see."""
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

    def __init__(self, terms: tuple[str, ...]) -> None:
        self.terms = tuple(term.casefold() for term in terms)

    def config(self) -> dict[str, Any]:
        # Pinned (as a digest) in every DECISION: a changed term list is visible in the ledger.
        return {"blocked_terms": list(self.terms)}

    def evaluate(self, policy_input: PolicyInput) -> PolicyDecision:
        for text in texts_of(policy_input):
            folded = text.casefold()
            if any(term in folded for term in self.terms):
                return PolicyDecision.deny("policy.blocked_term")
        return PolicyDecision.allow("policy.no_blocked_term")


# Read once, when the worker imports the module.
POLICY = BlockedTermsPolicy(terms_from_env(os.environ.get(ENV_VAR)))
