"""The verifier's candidate reconstruction equals the store's fetch (the workflow's call), and is
right where today's fetch is not: a ref that was cross-thread before a later in-thread match."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.audit.helpers import config
from turngate.audit import verify_all
from turngate.audit.verification.candidates import declared_ref_ids, ledger_candidates, read_candidates
from turngate.core.decision import decide
from turngate.core.events import Event, EventDraft, EventKind, parse_intent
from turngate.core.policy import load_policy
from turngate.ledger import LedgerStore


class Turns:
    """Turns recorded the way the workflow records them (candidates from the store's fetch)."""

    def __init__(self, store: LedgerStore) -> None:
        self.store = store
        self.policy = load_policy("turngate.policies.allow_all")
        self.intents: list[Event] = []

    def turn(self, cid: str, thread: str, refs: list[dict[str, Any]] = (), **payload: Any) -> dict[str, Any]:
        envelope = parse_intent(
            {
                "interface_version": 3,
                "correlation_id": cid,
                "payload": {
                    "intent_type": "chat.message",
                    "thread_id": thread,
                    "declared_refs": list(refs),
                    "payload": {"message": f"message {cid}"},
                    **payload,
                },
            }
        )
        intent = self.store.append(envelope.draft())
        self.intents.append(intent)
        ref_ids = declared_ref_ids(intent)
        candidates = self.store.fetch_ref_candidates(intent.thread_id, ref_ids) if ref_ids else []
        outcome = decide(intent, candidates, config(), self.policy)
        same = {"thread_id": intent.thread_id, "turn_id": intent.turn_id, "correlation_id": cid}
        decision = self.store.append(EventDraft(kind=EventKind.DECISION, payload=outcome.payload, **same))
        if outcome.allowed:
            payload = {"context_digest": outcome.context_digest, "output_text": f"answer {cid}"}
            self.store.append(EventDraft(kind=EventKind.EXECUTION, payload=payload, **same))
        return decision.payload


@pytest.fixture
def turns(tmp_path: Path) -> Turns:
    store = LedgerStore(f"sqlite:///{tmp_path / 'ledger.sqlite3'}")
    yield Turns(store)
    store.close()


def test_reconstruction_equals_the_store_fetch(turns: Turns) -> None:
    turns.turn("c-a", "t1")
    turns.turn(
        "c-b", "t1", [{"ref_id": "c-a"}, {"ref_type": "execution", "ref_id": "c-a"}], parent_turn_id="c-a"
    )
    digest_of_a = turns.store.by_correlation("c-a")[1].digest
    assert turns.turn("c-c", "t1", [{"ref_id": digest_of_a}, {"ref_id": "c-b"}])["decision"] == "ALLOW"
    assert turns.turn("c-x", "t2", [{"ref_id": "c-a"}])["reason_codes"] == ["CROSS_THREAD_REF"]
    assert turns.turn("c-y", "t2", [{"ref_id": digest_of_a}])["reason_codes"] == ["CROSS_THREAD_REF"]
    assert turns.turn("c-n", "t1", [{"ref_id": "nope"}, {"ref_id": "c-a"}])["reason_codes"] == [
        "REF_NOT_FOUND"
    ]
    turns.turn("c-t", "t1", [{"ref_type": "execution", "ref_id": "c-n"}])  # a DENY has no EXECUTION
    for intent in turns.intents:
        ref_ids = declared_ref_ids(intent)
        fetched = turns.store.fetch_ref_candidates(intent.thread_id, ref_ids) if ref_ids else []
        assert ledger_candidates(turns.store, intent) == fetched, intent.correlation_id
    with turns.store.read_connection() as conn:  # all at once, as verify reads a batch
        together = read_candidates(conn, turns.intents)
    for intent in turns.intents:
        ref_ids = declared_ref_ids(intent)
        if ref_ids:
            assert together[intent.correlation_id] == ledger_candidates(turns.store, intent)
    report = verify_all(turns.store, artifacts=None, context_config=config())
    assert report.ok, report.failures
    assert report.checked_decisions == len(turns.intents)


def test_a_cross_thread_ref_stays_cross_thread_after_a_later_match(turns: Turns) -> None:
    turns.turn("c-a", "t1")
    assert turns.turn("c-x", "t2", [{"ref_id": "c-a"}])["reason_codes"] == ["CROSS_THREAD_REF"]
    turns.turn("c-later", "t2", turn_id="c-a")  # now thread t2 has a turn "c-a", after c-x
    intent = turns.intents[1]
    # Today's fetch no longer offers the cross-thread event, so it alone would resolve
    # REF_NOT_FOUND; the reconstruction of the ledger as of the INTENT still finds it.
    today = turns.store.fetch_ref_candidates("t2", ["c-a"])
    assert all(event.thread_id == "t2" for event in today)
    assert [event.thread_id for event in ledger_candidates(turns.store, intent)] == ["t1"]
    report = verify_all(turns.store, artifacts=None, context_config=config())
    assert report.ok, report.failures
