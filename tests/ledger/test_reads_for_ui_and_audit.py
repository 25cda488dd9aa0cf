"""The store's reads for the observer UI and the audit: turn pages, thread pages, events of a kind,
and the candidate rules that the store and verify share."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.ledger.helpers import draft
from turngate.core.events import EventDraft, EventKind
from turngate.ledger import MAX_PAGE, LedgerStore
from turngate.ledger.ref_candidates import choose_ref_candidates
from turngate.ledger.thread_list import ThreadFilter


def _turn(
    store: LedgerStore, corr: str, thread: str, tenant: str | None = None, *, decided: bool = True
) -> None:
    kinds = [EventKind.INTENT, EventKind.DECISION] if decided else [EventKind.INTENT]
    for kind in kinds:
        base = draft(corr, kind, thread_id=thread, payload={"k": str(kind)})
        store.append(EventDraft.model_validate(base.model_dump() | {"tenant_id": tenant}))


@pytest.fixture
def turns(store: LedgerStore) -> LedgerStore:
    """Thread A: five turns of tenant acme (the last undecided); thread B: one of tenant beta."""
    for n in range(4):
        _turn(store, f"a-{n}", "A", "acme")
    _turn(store, "b-0", "B", "beta")
    _turn(store, "a-4", "A", "acme", decided=False)
    return store


def test_a_turn_page_is_its_intents_and_their_other_events(turns: LedgerStore) -> None:
    page = turns.turn_page("A", tenant_id=None, offset=1, limit=2)
    assert [e.correlation_id for e in page.intents] == ["a-1", "a-2"]
    assert [(e.correlation_id, e.kind) for e in page.others] == [
        ("a-1", EventKind.DECISION),
        ("a-2", EventKind.DECISION),
    ]
    assert (page.events, page.turns, page.first_index, page.last_index) == (9, 5, 0, 10)
    assert page.head_index == 10
    last = turns.turn_page("A", tenant_id=None, offset=4, limit=2)
    assert [e.correlation_id for e in last.intents] == ["a-4"] and last.others == []
    beyond = turns.turn_page("A", tenant_id=None, offset=5, limit=2)
    assert beyond.intents == [] and beyond.turns == 5


def test_a_turn_page_holds_only_the_tenants_events(turns: LedgerStore) -> None:
    assert turns.turn_page("A", tenant_id="beta", offset=0, limit=10).events == 0
    page = turns.turn_page("B", tenant_id="beta", offset=0, limit=10)
    assert [e.correlation_id for e in page.intents] == ["b-0"] and page.events == 2
    empty = turns.turn_page("nowhere", tenant_id=None, offset=0, limit=10)
    assert (empty.events, empty.turns, empty.first_index, empty.intents) == (0, 0, None, [])


def test_a_thread_page_comes_with_the_head(turns: LedgerStore, store: LedgerStore) -> None:
    page, head = turns.thread_page(ThreadFilter(None), limit=10)
    assert [row.thread_id for row in page.threads] == ["A", "B"] and head == 10
    page, _ = turns.thread_page(ThreadFilter("beta"), limit=10)
    assert [row.thread_id for row in page.threads] == ["B"]


def test_an_empty_ledger_has_no_head(store: LedgerStore) -> None:
    page, head = store.thread_page(ThreadFilter(None), limit=10)
    assert page.threads == [] and head is None


def test_events_of_one_kind(turns: LedgerStore) -> None:
    decisions = turns.of_kind(EventKind.DECISION)
    assert [e.correlation_id for e in decisions] == ["a-0", "a-1", "a-2", "a-3", "b-0"]
    assert all(e.kind == EventKind.DECISION for e in decisions)
    after = decisions[1].index
    assert [e.correlation_id for e in turns.of_kind("DECISION", after_index=after)][:1] == ["a-2"]
    until = decisions[2].index
    assert [e.correlation_id for e in turns.of_kind("DECISION", until_index=until)] == ["a-0", "a-1", "a-2"]
    assert [e.correlation_id for e in turns.of_kind("DECISION", thread_id="B")] == ["b-0"]
    assert [e.correlation_id for e in turns.of_kind("INTENT", limit=2)] == ["a-0", "a-1"]
    assert turns.of_kind("DECISION", limit=0) == []
    assert turns.of_kind("EXECUTION") == []


@pytest.mark.backends("sqlite", reason="the cap is the store's, whatever the backend")
def test_events_of_one_kind_are_capped_at_a_page(store: LedgerStore) -> None:
    store.append_many([draft(f"c-{n}") for n in range(MAX_PAGE + 1)])
    assert len(store.of_kind("INTENT", limit=MAX_PAGE - 1)) == MAX_PAGE - 1
    assert len(store.of_kind("INTENT", limit=MAX_PAGE)) == MAX_PAGE
    assert len(store.of_kind("INTENT", limit=MAX_PAGE + 1)) == MAX_PAGE


# ------------------------------------------------------------------ the candidate rules


@dataclass(frozen=True)
class Keys:
    index: int
    thread_id: str
    correlation_id: str
    turn_id: str
    digest: str


def _keys(*rows: tuple[int, str, str, str]) -> list[Keys]:
    return [Keys(index, thread, corr, turn, f"d-{index}") for index, thread, corr, turn in rows]


def test_the_rules_prefer_the_thread_and_report_one_event_elsewhere() -> None:
    found = _keys(
        (1, "A", "c-1", "t-1"), (2, "A", "c-1", "t-1"), (5, "B", "c-9", "t-9"), (7, "B", "c-9", "t-9")
    )
    by_turn = {"t-8": Keys(3, "C", "c-8", "t-8", "d-3")}
    chosen = choose_ref_candidates("A", ["c-1", "c-9", "t-8", "nope"], found, by_turn.get)
    assert [k.index for k in chosen] == [1, 2, 3, 5]  # c-9: the lowest index of thread B only
    # A ref matched in the thread brings nothing from elsewhere, however early it is there.
    early = Keys(0, "B", "c-1", "t-0", "d-0")
    assert [k.index for k in choose_ref_candidates("A", ["c-1"], [early, *found], by_turn.get)] == [1, 2]
    # Found events that match no ref are ignored; a turn_id counts in the thread only.
    assert choose_ref_candidates("A", ["t-9"], found, lambda _ref: None) == []
    assert choose_ref_candidates("A", [], found, by_turn.get) == []


def test_the_lower_index_wins_between_a_digest_match_and_a_turn_match_elsewhere() -> None:
    found = _keys((6, "B", "c-x", "t-x"))
    elsewhere = Keys(4, "C", "c-y", "d-6", "d-y")  # turn_id d-6, in thread C
    chosen = choose_ref_candidates("A", ["d-6"], found, lambda ref: elsewhere if ref == "d-6" else None)
    assert [k.index for k in chosen] == [4]
