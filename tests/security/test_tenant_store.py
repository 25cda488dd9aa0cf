"""The ledger's tenant filters, on both backends: every read the API serves a tenant from
(snapshot, since, last, by_correlation, turn_events, fetch_ref_candidates) sees only that
tenant's events; None means unscoped. The tenant column round-trips and is indexed."""

from __future__ import annotations

from sqlalchemy import inspect

from tests.ledger.helpers import draft
from turngate.core.events import EventKind
from turngate.ledger import LedgerStore, verify_ledger


def _seed(store: LedgerStore) -> None:
    for cid, tenant, thread in (("a1", "A", "ta"), ("b1", "B", "tb"), ("a2", "A", "ta"), ("n1", None, "tn")):
        store.append(draft(cid, thread_id=thread).model_copy(update={"tenant_id": tenant}))
    store.append(draft("a1", EventKind.DECISION, thread_id="ta").model_copy(update={"tenant_id": "A"}))


def test_reads_only_see_the_callers_tenant(store: LedgerStore) -> None:
    _seed(store)
    assert store.snapshot(tenant_id="A")[0] == 3
    assert {e.correlation_id for e in store.snapshot(tenant_id="B")[1]} == {"b1"}
    assert store.snapshot()[0] == 5  # unscoped
    assert store.snapshot(tenant_id="B", thread_id="ta")[0] == 0
    assert [e.correlation_id for e in store.since(-1, tenant_id="B")] == ["b1"]
    assert [e.correlation_id for e in store.last(10, tenant_id="A")] == ["a1", "a2", "a1"]
    assert store.by_correlation("a1", tenant_id="B") == []
    assert len(store.by_correlation("a1", tenant_id="A")) == 2
    assert store.turn_events("ta", "a1", tenant_id="B") == []
    # thread "ta" holds tenant A's events only; an unknown thread holds nobody's
    assert not store.thread_has_other_tenant("ta", "A") and store.thread_has_other_tenant("ta", "B")
    assert store.thread_has_other_tenant("ta", None)
    assert not store.thread_has_other_tenant("nope", "A") and not store.thread_has_other_tenant("nope", None)
    assert store.get(0) is not None and store.get(0).tenant_id == "A"  # type: ignore[union-attr]
    assert verify_ledger(store).ok


def test_ref_candidates_never_cross_tenants(store: LedgerStore) -> None:
    _seed(store)
    a1 = store.by_correlation("a1")[0]
    # B, in its own thread, asks for A's turn by correlation id, turn id and digest: nothing.
    assert store.fetch_ref_candidates("tb", ["a1", a1.digest], tenant_id="B") == []
    # Unscoped (dev) resolution still reports the cross-thread candidate as before.
    assert [e.correlation_id for e in store.fetch_ref_candidates("tb", ["a1"])] == ["a1"]
    # A sees its own events.
    own = store.fetch_ref_candidates("ta", ["a1", "a2"], tenant_id="A")
    assert {e.correlation_id for e in own} == {"a1", "a2"}


def test_the_tenant_column_is_indexed(store: LedgerStore) -> None:
    indexes = [ix["column_names"] for ix in inspect(store.engine).get_indexes("events")]
    assert ["tenant_id", "index"] in indexes
