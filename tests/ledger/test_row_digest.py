"""The raw-row digest path gives byte-identical digests to core.events.event_digest."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

import turngate.core.events as core_events
import turngate.ledger.row_digest as row_digest
from tests.ledger.helpers import RawDb, draft
from turngate.core.canonical import canonical_bytes, digest_bytes
from turngate.core.events import EventDraft, event_digest, strip_obs
from turngate.ledger import LedgerStore, verify_ledger
from turngate.ledger.row_digest import RowDigester, UnreadableRow, derive_scope_plan
from turngate.ledger.schema import events, index_column

#: Payloads that take every path: plain, floats, an unsafe integer, keys whose code-point and
#: UTF-16 orders differ, escapes, an _obs part, nested pointers.
PAYLOADS: list[dict[str, Any]] = [
    {"message": "plain"},
    {"message": "m", "_obs": {"latency_ms": 3, "ratio": 0.5}},
    {"message": "m", "_debug": {"kept": True}},
    {"score": 1.5, "tiny": 1e-7, "big": 1e21, "neg": -0.0},
    {"count": 2**53 - 1, "digits": "12345678901234567890"},
    {"\ue000": 1, "\U0001f600": 2, "é": [1, "ü"], "z": '\u2028\x7f\x1f\n\t"\\'},
    {"nested": {"a": [{"b": None, "c": True}], "manifest": {"artifact_id": "x", "size_bytes": 3}}},
    {},
]


def _drafts() -> list[EventDraft]:
    out = [draft(f"c-{i}", payload=payload) for i, payload in enumerate(PAYLOADS)]
    child = draft("c-parent", payload={"message": "child"})
    out.append(child.model_copy(update={"parent_turn_id": "turn-0"}))
    tenant = draft("c-tenant", payload={"message": "with a tenant"})
    out.append(tenant.model_copy(update={"tenant_id": "tenant-a"}))
    return out


def _rows(store: LedgerStore) -> tuple[tuple[str, ...], list[Any]]:
    with store.read_connection() as conn:
        result = conn.execute(select(events).order_by(index_column))
        return tuple(result.keys()), list(result)


def test_fast_digests_are_byte_identical_to_event_digest(store: LedgerStore) -> None:
    sealed = store.append_many(_drafts())
    columns, rows = _rows(store)
    fast, model = RowDigester(columns), RowDigester(columns, plan=None)
    assert row_digest._PLAN is not None  # today's scope is explained: the fast path runs
    for event, row in zip(sealed, rows, strict=True):
        expected = event_digest(event, event.index, event.prev_event_digest)
        assert event.digest == expected
        assert fast.digest(row)[0] == expected, event.payload
        assert model.digest(row)[0] == expected
        assert fast.digest(row)[1] == event.payload
    assert verify_ledger(store).ok


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("kind", "BOGUS"),
        ("thread_id", "another-thread"),
        ("parent_turn_id", "t-x"),
        ("actor", "admin"),
        ("prev_event_digest", "sha256:" + "0" * 64),
        ("payload", '{"message":"forged"}'),
        ("payload", '{"message": "plain" }'),  # same value, other spelling: not a change
    ],
)
def test_tampered_rows_are_detected(store: LedgerStore, db: RawDb, column: str, value: str) -> None:
    store.append_many(_drafts())
    db.drop_append_only_triggers()
    db.execute(f'UPDATE events SET "{column}" = :value WHERE "index" = 0', {"value": value})
    columns, rows = _rows(store)
    recomputed = RowDigester(columns).digest(rows[0])[0]
    assert recomputed == RowDigester(columns, plan=None).digest(rows[0])[0]
    report = verify_ledger(store)
    if value == '{"message": "plain" }':
        assert report.ok and recomputed == rows[0][columns.index("digest")]
        return
    assert recomputed != rows[0][columns.index("digest")]
    assert ("digest_mismatch", 0) in [(p.kind.value, p.index) for p in report.problems]


def test_an_obs_change_is_not_a_change(store: LedgerStore, db: RawDb) -> None:
    store.append_many(_drafts())
    db.drop_append_only_triggers()
    payload = canonical_bytes({"message": "m", "_obs": {"latency_ms": 999}}).decode()
    db.execute('UPDATE events SET payload = :p WHERE "index" = 1', {"p": payload})
    assert verify_ledger(store).ok


@pytest.mark.parametrize("payload", ["[1, 2]", "not json", '"text"'])
def test_unreadable_payloads_raise(store: LedgerStore, db: RawDb, payload: str) -> None:
    store.append(draft("c-0"))
    db.drop_append_only_triggers()
    db.execute("UPDATE events SET payload = :p", {"p": payload})
    columns, rows = _rows(store)
    with pytest.raises(UnreadableRow):
        RowDigester(columns).digest(rows[0])


def _scope_with_tenant(draft: EventDraft, index: int, prev: str | None) -> dict[str, Any]:
    return {
        "index": index,
        "prev_event_digest": prev,
        "kind": str(draft.kind),
        "thread_id": draft.thread_id,
        "turn_id": draft.turn_id,
        "parent_turn_id": draft.parent_turn_id,
        "correlation_id": draft.correlation_id,
        "stream_id": draft.stream_id,
        "lane": draft.lane,
        "actor": draft.actor,
        "intent_type": draft.intent_type,
        "tenant_id": draft.tenant_id,
        "payload": strip_obs(draft.payload),
    }


def _patch_scope(monkeypatch: pytest.MonkeyPatch, scope: Any) -> None:
    monkeypatch.setattr(core_events, "event_digest_scope", scope)
    monkeypatch.setattr(row_digest, "event_digest_scope", scope)


def test_a_field_added_to_the_scope_is_picked_up(store: LedgerStore, monkeypatch: pytest.MonkeyPatch) -> None:
    _patch_scope(monkeypatch, _scope_with_tenant)
    plan = derive_scope_plan()
    assert plan is not None
    assert ("tenant_id", ("field", "tenant_id")) in plan.sources
    sealed = store.append_many(_drafts())  # sealed under the wider scope
    columns, rows = _rows(store)
    fast = RowDigester(columns, plan)
    for event, row in zip(sealed, rows, strict=True):
        assert (
            fast.digest(row)[0] == event.digest == event_digest(event, event.index, event.prev_event_digest)
        )
    # The tenant is now inside the digest: changing it is detected.
    tenant = list(rows[-1])
    tenant[columns.index("tenant_id")] = "tenant-b"
    assert fast.digest(tuple(tenant))[0] != sealed[-1].digest


@pytest.mark.parametrize(
    ("extra", "planned"),
    [
        (lambda d: {"thread": d.thread_id.upper()}, False),  # derived from a field
        (lambda d: {"parent_turn_id": d.parent_turn_id or ""}, False),  # None mapped to ""
        (lambda d: {"payload": {k: v for k, v in d.payload.items() if k[:1] != "_"}}, False),
        (lambda d: {"payload": d.payload}, True),  # _obs no longer stripped: still a selection
    ],
)
def test_a_scope_that_is_not_a_plain_selection(
    store: LedgerStore, monkeypatch: pytest.MonkeyPatch, extra: Any, planned: bool
) -> None:
    original = core_events.event_digest_scope

    def scope(d: EventDraft, index: int, prev: str | None) -> dict[str, Any]:
        return original(d, index, prev) | extra(d)

    _patch_scope(monkeypatch, scope)
    plan = derive_scope_plan()
    assert (plan is not None) == planned
    sealed = store.append_many(_drafts())
    columns, rows = _rows(store)
    for event, row in zip(sealed, rows, strict=True):
        expected = digest_bytes(canonical_bytes(scope(event, event.index, event.prev_event_digest)))
        assert RowDigester(columns, plan).digest(row)[0] == expected == event.digest
