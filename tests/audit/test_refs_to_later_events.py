"""Refs resolve only to events recorded before the INTENT: `turngate verify` and the ledger replay
refuse a DECISION whose context names a later event, even though the ledger hands the later
event over as a ref candidate today."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from turngate.audit import verify_all
from turngate.audit.replay import replay_turn
from turngate.core.context import ContextConfig, load_context_config
from turngate.core.decision import decide
from turngate.core.events import Event, EventDraft, EventKind, parse_intent
from turngate.core.policy import load_policy
from turngate.ledger import LedgerStore

ALLOW_ALL = "turngate.policies.allow_all"
ECHO = {"provider": "echo", "requested_model_id": None, "resolved_model_id": "echo-1"}


def _intent(correlation_id: str, refs: list[dict[str, Any]], parent: str | None = "c-1") -> EventDraft:
    payload = {
        "intent_type": "chat.message",
        "thread_id": "t",
        "parent_turn_id": parent,
        "declared_refs": refs,
        "payload": {"message": f"message of {correlation_id}"},
    }
    return parse_intent(
        {"interface_version": 3, "correlation_id": correlation_id, "payload": payload}
    ).draft()


def _decision(intent: Event, payload: dict[str, Any]) -> EventDraft:
    identity = intent.model_dump(include={"thread_id", "turn_id", "parent_turn_id", "correlation_id"})
    return EventDraft(kind=EventKind.DECISION, intent_type=intent.intent_type, payload=payload, **identity)


@pytest.fixture
def config() -> ContextConfig:
    return load_context_config(None, {})


@pytest.fixture
def store(tmp_path: Path, config: ContextConfig) -> LedgerStore:
    """Two turns of thread t in flight at once: c-2 names c-1 and c-3, whose INTENT came after
    c-2's. c-2's DECISION is what a gateway that let refs see the future would record: ALLOW,
    with c-3's INTENT in its context. Every digest and chain link is intact. (The earlier ref
    makes verify and replay take their second opinion, the candidates as the store fetches them
    today, later events included: only the resolver's own rule refuses those.)"""
    policy = load_policy(ALLOW_ALL)
    ledger = LedgerStore(f"sqlite:///{tmp_path / 'ledger.sqlite3'}")
    first = ledger.append(_intent("c-1", [], parent=None))
    ledger.append(_decision(first, decide(first, [], config, policy, execution=ECHO).payload))
    early = ledger.append(_intent("c-2", [{"ref_id": "c-1"}, {"ref_id": "c-3"}]))
    later = ledger.append(_intent("c-3", [{"ref_id": "c-1"}]))
    seeing_the_future = early.model_copy(update={"index": later.index + 1})
    forged = decide(seeing_the_future, [first, later], config, policy, execution=ECHO)
    assert forged.allowed and forged.payload["resolved_refs"][1]["event_index"] == later.index
    ledger.append(_decision(early, forged.payload))
    ledger.append(_decision(later, decide(later, [first], config, policy, execution=ECHO).payload))
    yield ledger
    ledger.close()


def test_verify_refuses_a_decision_whose_ref_names_a_later_event(
    store: LedgerStore, config: ContextConfig
) -> None:
    report = verify_all(store, artifacts=None, context_config=config)
    assert not report.ok
    assert {f.correlation_id for f in report.failures} == {"c-2"}, report.failures
    assert any("resolved_refs differ" in f.detail for f in report.failures), report.failures
    assert verify_all(store, artifacts=None, context_config=config, thread_id="t").ok is False


def test_replay_refuses_a_decision_whose_ref_names_a_later_event(
    store: LedgerStore, config: ContextConfig
) -> None:
    replay = replay_turn(store, "c-2", context_config=config, policy_module=ALLOW_ALL)
    assert not replay.ok
    failed = {check.name for check in replay.checks if check.status == "fail"}
    assert "resolved_refs" in failed, replay.checks
    assert replay.replayed["reason_codes"] == ["REF_NOT_FOUND"]
    # The turn recorded after it names an earlier event and replays.
    assert replay_turn(store, "c-3", context_config=config, policy_module=ALLOW_ALL).ok
