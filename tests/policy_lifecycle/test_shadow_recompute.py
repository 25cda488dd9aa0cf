"""`turngate verify` recomputes shadow entries instead of trusting them."""

from __future__ import annotations

from typing import Any

import pytest

from turngate.audit import verify_all
from turngate.core.context import load_context_config
from turngate.core.decision import decide
from turngate.core.events import EventDraft, EventKind, parse_intent
from turngate.core.policy import load_policy
from turngate.core.shadow import with_shadows
from turngate.ledger import LedgerStore

MAX_USER = "turngate.policies.max_user_messages"


def record_turn(store: LedgerStore, shadow_edit: dict[str, Any] | None) -> None:
    envelope = parse_intent(
        {
            "interface_version": 3,
            "correlation_id": "c-1",
            "payload": {"intent_type": "chat.message", "thread_id": "t", "payload": {"message": "hi"}},
        }
    )
    intent = store.append(envelope.draft())
    cfg = load_context_config(None, {})
    outcome = with_shadows(
        decide(intent, [], cfg, load_policy("turngate.policies.allow_all")), [load_policy(MAX_USER)]
    )
    payload = dict(outcome.payload)
    if shadow_edit is not None:
        payload["shadow"] = [payload["shadow"][0] | shadow_edit]
    store.append(
        EventDraft(
            kind=EventKind.DECISION,
            thread_id=intent.thread_id,
            turn_id=intent.turn_id,
            parent_turn_id=None,
            correlation_id=intent.correlation_id,
            stream_id=intent.stream_id,
            lane=intent.lane,
            actor=intent.actor,
            intent_type=intent.intent_type,
            payload=payload,
        )
    )


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (None, None),
        ({"decision": "DENY", "reason_codes": ["policy.max_user_messages_exceeded"]}, "shadow_mismatch"),
        ({"policy_version": "7"}, None),  # a policy verify cannot re-run here: left as recorded
    ],
)
def test_verify_recomputes_shadow_entries(tmp_path, edit, problem) -> None:
    store = LedgerStore(f"sqlite:///{tmp_path / 'ledger.sqlite3'}")
    try:
        record_turn(store, edit)
        report = verify_all(store, artifacts=None, context_config=load_context_config(None, {}), workers=1)
    finally:
        store.close()
    assert report.checked_decisions == 1
    details = [f.detail for f in report.failures]
    if problem is None:
        assert report.ok, details
    else:
        assert not report.ok and details[0].startswith(problem), details
