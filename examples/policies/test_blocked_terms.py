"""Unit tests of the example policy: `pytest examples/policies` (with turngate installed)."""

from __future__ import annotations

import pytest
from blocked_terms import REASON_BLOCKED, REASON_CLEAN, BlockedTermsPolicy

from turngate.core.canonical import digest
from turngate.core.policy import GovernanceItem, IntentView, PolicyInput, load_policy


def policy_input(message: str, *earlier: str) -> PolicyInput:
    intent = IntentView(
        intent_type="chat.message",
        thread_id="t",
        turn_id="c-2",
        parent_turn_id="c-1",
        actor="user",
        lane="user_chat",
        stream_id="default",
        message=message,
        inputs={},
        declared_tools=(),
        requested_model_id=None,
    )
    items = tuple(
        GovernanceItem(
            event_index=i,
            event_digest=f"sha256:{i:064d}",
            actor="user",
            intent_type="chat.message",
            message=m,
        )
        for i, m in enumerate(earlier)
    )
    return PolicyInput(intent=intent, i_context=items)


@pytest.mark.parametrize(
    ("message", "earlier", "reason"),
    [
        ("What is the weather?", (), REASON_CLEAN),
        ("my PASSWORD is hunter2", (), REASON_BLOCKED),
        ("and now?", ("here is my api key",), REASON_BLOCKED),  # a referenced message counts
        ("api-key", (), REASON_CLEAN),  # not the term as configured
    ],
)
def test_decisions(message: str, earlier: tuple[str, ...], reason: str) -> None:
    decision = BlockedTermsPolicy().evaluate(policy_input(message, *earlier))
    assert decision.reason_codes == (reason,)
    assert decision.decision == ("DENY" if reason == REASON_BLOCKED else "ALLOW")


def test_the_terms_are_in_the_config_digest() -> None:
    assert BlockedTermsPolicy(["b", "a"]).config() == {"blocked_terms": ["a", "b"]}
    assert digest(BlockedTermsPolicy(["a"]).config()) != digest(BlockedTermsPolicy(["a", "b"]).config())
    with pytest.raises(ValueError):
        BlockedTermsPolicy([" "])


def test_it_loads_as_turngate_loads_policies() -> None:
    loaded = load_policy("blocked_terms")
    assert (loaded.policy_id, loaded.policy_version) == ("example.blocked_terms", "1")
    assert loaded.config_digest == digest({"blocked_terms": ["api key", "password"]})
