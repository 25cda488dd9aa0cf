"""The thread claim rule, on both backends: an INTENT recorded with ``claim_thread=True`` never
mixes tenants in its thread, atomically with the append (the API's check before a turn starts
cannot be: two tenants can both pass it while no INTENT is recorded yet). The API's reading of
the rule (``blocks_intent``, one event at a time) agrees with the store's (``intent_blocked``)."""

from __future__ import annotations

import itertools

import pytest

from tests.ledger.helpers import draft
from turngate.core.events import EventDraft, EventKind
from turngate.ledger import LedgerConflictError, LedgerStore, verify_ledger
from turngate.ledger.thread_claims import ThreadInUseError, blocks_intent


def _intent(cid: str, tenant: str | None, thread: str = "t", turn: str | None = None) -> EventDraft:
    return draft(cid, thread_id=thread, turn_id=turn).model_copy(update={"tenant_id": tenant})


def test_a_tenants_intent_is_refused_in_another_tenants_thread(store: LedgerStore) -> None:
    store.append(_intent("a1", "alice"), claim_thread=True)
    with pytest.raises(ThreadInUseError) as caught:
        store.append(_intent("b1", "bob", turn="a1"), claim_thread=True)  # the same turn ids
    assert isinstance(caught.value, LedgerConflictError)  # never retried by the worker
    assert "alice" not in str(caught.value)
    with pytest.raises(ThreadInUseError):
        store.append(_intent("b2", "bob", turn="another-turn"), claim_thread=True)
    store.append(_intent("n1", None, thread="t2"), claim_thread=True)
    with pytest.raises(ThreadInUseError):  # no tenant counts as another tenant
        store.append(_intent("a3", "alice", thread="t2"), claim_thread=True)
    assert store.by_correlation("b1") == store.by_correlation("b2") == store.by_correlation("a3") == []
    # the owner goes on: new turns, and its recorded INTENT again (idempotent)
    store.append(_intent("a4", "alice"), claim_thread=True)
    assert store.append(_intent("a1", "alice"), claim_thread=True).index == 0
    assert store.intent_blocked("bob", "t", "x") and not store.intent_blocked("alice", "t", "x")
    store.append(draft("a1", EventKind.DECISION, thread_id="t").model_copy(update={"tenant_id": "alice"}))
    assert verify_ledger(store).ok


def test_an_unscoped_intent_may_join_a_thread_but_not_a_tenants_turn(store: LedgerStore) -> None:
    store.append(_intent("a1", "alice"), claim_thread=True)
    store.append(_intent("n1", None, turn="operator-turn"), claim_thread=True)
    with pytest.raises(ThreadInUseError):
        store.append(_intent("n2", None, turn="a1"), claim_thread=True)
    assert [e.correlation_id for e in store.turn_events("t", "a1")] == ["a1"]


def test_without_a_claim_the_append_is_as_before(store: LedgerStore) -> None:
    """Tools and imports append without the rule; the API never records an INTENT that way."""
    store.append(_intent("a1", "alice"))
    store.append(_intent("b1", "bob"))
    assert {e.tenant_id for e in store.snapshot(thread_id="t")[1]} == {"alice", "bob"}


def test_the_apis_reading_of_the_rule_agrees_with_the_store(store: LedgerStore) -> None:
    tenants = ("alice", "bob", None)
    recorded = []
    for n, (tenant, thread, turn) in enumerate(itertools.product(tenants, ("t1", "t2"), ("u1", "u2"))):
        if (tenant, thread) in {("bob", "t1"), (None, "t2")}:
            continue  # leave some threads with one tenant
        recorded.append(store.append(_intent(f"c{n}", tenant, thread, turn)))
    for tenant, thread, turn in itertools.product(
        (*tenants, "carol"), ("t1", "t2", "t3"), ("u1", "u2", "u3")
    ):
        expected = store.intent_blocked(tenant, thread, turn)
        assert any(blocks_intent(tenant, thread, turn, e) for e in recorded) is expected, (
            tenant,
            thread,
            turn,
        )
