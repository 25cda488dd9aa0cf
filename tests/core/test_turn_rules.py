"""The deny-or-continue rules after the policy (core/turn_rules.py), without Temporal."""

from __future__ import annotations

import pytest

from turngate.core.context import ContextConfig
from turngate.core.decision import DecisionOutcome, decide
from turngate.core.model_resolution import ModelResolution
from turngate.core.policy import load_policy
from turngate.core.provider_errors import (
    FALLBACK_CODES,
    NON_RETRYABLE_PROVIDER_ERRORS,
    PROVIDER_ERROR_TYPES,
)
from turngate.core.turn_rules import MODEL_UNAVAILABLE, Denial, deny_or_continue, turn_denial

EXECUTION = {"provider": "echo", "requested_model_id": None, "resolved_model_id": "echo-1"}
OK = ModelResolution(provider="echo", requested_model_id=None, resolved_model_id="echo-1", ok=True)
UNKNOWN = ModelResolution(
    provider="nope",
    requested_model_id="nope:x",
    resolved_model_id="x",
    reason_code="provider.unknown",
    ok=False,
)
PROMPT_ERROR = {"code": "prompt.snapshot_incompatible", "detail": "layer gone", "cause": "KeyError"}


def _outcome(new_chain, policy: str) -> DecisionOutcome:
    chain = new_chain()
    current = chain.intent("T", "1", "hello")
    return decide(current, [], ContextConfig(), load_policy(policy), execution=EXECUTION)


@pytest.fixture
def allowed(new_chain) -> DecisionOutcome:
    return _outcome(new_chain, "turngate.policies.allow_all")


def test_an_allowed_turn_with_nothing_wrong_continues_unchanged(allowed) -> None:
    assert deny_or_continue(allowed, model=OK) is allowed


def test_the_first_rule_that_applies_denies_in_order(allowed) -> None:
    every = deny_or_continue(allowed, prompt_error=PROMPT_ERROR, model=UNKNOWN, client_context_error="bad")
    assert every.record.decision == "DENY"
    assert every.record.reason_codes == ["prompt.snapshot_incompatible"]
    assert every.record.error == PROMPT_ERROR
    model_then_client = deny_or_continue(allowed, model=UNKNOWN, client_context_error="bad")
    assert model_then_client.record.reason_codes == ["provider.unknown"]
    client = deny_or_continue(allowed, model=OK, client_context_error="messages[0]: not a message")
    assert client.record.reason_codes == ["intent.invalid_client_context"]
    assert client.record.error == {
        "code": "intent.invalid_client_context",
        "detail": "messages[0]: not a message",
    }


def test_an_unusable_model_without_a_reason_is_model_unavailable() -> None:
    vague = UNKNOWN.model_copy(update={"reason_code": None})
    assert turn_denial(prompt_error=None, model=vague, client_context_error=None) == Denial(MODEL_UNAVAILABLE)


def test_a_turn_the_policy_denied_keeps_its_own_reason(new_chain) -> None:
    denied = _outcome(new_chain, "turngate.policies.deny_all")
    assert not denied.allowed
    after = deny_or_continue(denied, prompt_error=PROMPT_ERROR, model=UNKNOWN, client_context_error="bad")
    assert after is denied


def test_retry_and_fallback_lists_come_from_the_one_error_table() -> None:
    assert "provider.invalid_response" in NON_RETRYABLE_PROVIDER_ERRORS
    assert set(NON_RETRYABLE_PROVIDER_ERRORS).isdisjoint(FALLBACK_CODES)
    assert set(NON_RETRYABLE_PROVIDER_ERRORS) | FALLBACK_CODES == set(PROVIDER_ERROR_TYPES) | {"llm.timeout"}
