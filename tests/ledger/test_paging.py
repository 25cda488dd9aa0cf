"""Paging contracts of the read paths, on both backends.

/snapshot: ``offset`` is a 0-based, gapless position in the (filtered) log; pages at every offset
and size tile it exactly; ``length`` is the filtered log's length. The thread list: keyset pages
(``before`` = the previous page's ``next_before``) visit every thread once, in order, and equal
the offset pages; every filter selects exactly the threads a recomputation selects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.ledger.summaries import all_events, mixed_ledger, recompute
from turngate.core.events import Event
from turngate.ledger import MAX_PAGE, LedgerStore
from turngate.ledger.thread_list import ThreadFilter, list_threads


@pytest.fixture
def mixed(store: LedgerStore) -> list[Event]:
    mixed_ledger(store)
    return all_events(store)


def test_unfiltered_offsets_are_gapless_positions(store: LedgerStore, mixed: list[Event]) -> None:
    n = len(mixed)
    for offset in (0, 1, n // 2, n - 2, n - 1, n, n + 1, 10**12):
        for limit in (1, 7, n, MAX_PAGE + 1):
            length, page = store.snapshot(offset=offset, limit=limit)
            assert length == n
            assert page == mixed[offset : offset + min(limit, MAX_PAGE)], (offset, limit)
    # walking page by page visits every event once
    walked: list[Event] = []
    while len(page := store.snapshot(offset=len(walked), limit=9)[1]) > 0:
        walked += page
    assert walked == mixed


FILTERS: list[dict[str, Any]] = [
    {"tenant_id": "acme"},
    {"tenant_id": "globex", "stream_id": "audit"},
    {"stream_id": "audit"},
    {"stream_id": "default", "lane": "batch"},
    {"lane": "batch"},
    {"tenant_id": "acme", "stream_id": "default", "lane": "user_chat"},
    {"thread_id": "t-3"},
    {"thread_id": "t-3", "tenant_id": "acme"},
    {"thread_id": "t-2", "stream_id": "audit", "lane": "batch"},
    {"tenant_id": "nobody"},
    {"stream_id": "no-such-stream"},
]


def _matches(event: Event, wanted: dict[str, Any]) -> bool:
    fields = {"tenant_id": event.tenant_id, "stream_id": event.stream_id, "lane": event.lane}
    fields["thread_id"] = event.thread_id
    return all(fields[name] == value for name, value in wanted.items())


@pytest.mark.parametrize("wanted", FILTERS, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()))
def test_filtered_pages_tile_the_filtered_log(
    store: LedgerStore, mixed: list[Event], wanted: dict[str, Any]
) -> None:
    expected = [event for event in mixed if _matches(event, wanted)]
    for limit in (1, 4, 1000):
        walked: list[Event] = []
        while True:
            length, page = store.snapshot(offset=len(walked), limit=limit, **wanted)
            assert length == len(expected)
            if not page:
                break
            walked += page
        assert walked == expected
    for offset in (0, len(expected) // 2, len(expected), len(expected) + 5):
        assert store.snapshot(offset=offset, limit=3, **wanted)[1] == expected[offset : offset + 3]


def _expected_threads(
    store: LedgerStore, keep: Callable[[tuple[str, str], dict[str, Any]], bool]
) -> list[str]:
    rows = recompute(store)["threads"]
    chosen = [(row["last_index"], key) for key, row in rows.items() if keep(key, row)]
    return [f"{tenant}/{thread}" for _, (tenant, thread) in sorted(chosen, reverse=True)]


def _keyset_walk(store: LedgerStore, wanted: ThreadFilter, limit: int) -> tuple[list[str], int]:
    seen: list[str] = []
    before: int | None = None
    with store.read_connection() as conn:
        while True:
            page = list_threads(conn, wanted, limit=limit, before=before)
            seen += [f"{row.tenant_id or ''}/{row.thread_id}" for row in page.threads]
            if page.next_before is None:
                return seen, page.total
            before = page.next_before


def test_keyset_pages_visit_every_thread_once_in_order(store: LedgerStore, mixed: list[Event]) -> None:
    everything = _expected_threads(store, lambda key, row: True)
    assert len(everything) > 10
    for limit in (1, 2, 5, len(everything), len(everything) + 1):
        walked, total = _keyset_walk(store, ThreadFilter(None), limit)
        assert walked == everything and total == len(everything), limit
        with store.read_connection() as conn:  # offset pages agree with keyset pages
            by_offset = [
                f"{row.tenant_id or ''}/{row.thread_id}"
                for offset in range(0, len(everything), limit)
                for row in list_threads(conn, ThreadFilter(None), limit=limit, offset=offset).threads
            ]
        assert by_offset == everything


@pytest.mark.parametrize(("count_cap", "merged_max"), [(3, 64), (3, 1), (1000, 1)])
def test_pages_past_the_counted_matches_and_without_a_tenant_merge_agree(
    store: LedgerStore, mixed: list[Event], monkeypatch: pytest.MonkeyPatch, count_cap: int, merged_max: int
) -> None:
    """Pages beyond the newest ``COUNT_CAP`` matches seek on their own; an unscoped caller's list
    merges the tenants' ranges or (past ``MERGED_TENANTS_MAX`` tenants) reads the summary as one:
    every way, the same threads in the same order, keyset and offset pages alike."""
    from turngate.ledger import thread_list

    monkeypatch.setattr(thread_list, "COUNT_CAP", count_cap)
    monkeypatch.setattr(thread_list, "MERGED_TENANTS_MAX", merged_max)
    for wanted, keep in (
        (ThreadFilter(None), lambda key, row: True),
        (ThreadFilter("acme"), lambda key, row: key[0] == "acme"),
        (ThreadFilter(None, decision="ALLOW"), lambda key, row: row["allowed"] > 0),
    ):
        expected = _expected_threads(store, keep)
        assert len(expected) > count_cap or count_cap == 1000
        for limit in (1, 2, 5):
            walked, total = _keyset_walk(store, wanted, limit)
            assert walked == expected and total == min(len(expected), count_cap), (wanted, limit)
            with store.read_connection() as conn:
                by_offset = [
                    f"{row.tenant_id or ''}/{row.thread_id}"
                    for offset in range(0, len(expected) + limit, limit)
                    for row in list_threads(conn, wanted, limit=limit, offset=offset).threads
                ]
            assert by_offset == expected, (wanted, limit)


def _actor_in(store: LedgerStore, actor: str) -> Callable[[tuple[str, str], dict[str, Any]], bool]:
    actors = recompute(store)["actors"]
    return lambda key, _row: (key[0], key[1], actor) in actors


def test_thread_filters_select_what_a_recomputation_selects(store: LedgerStore, mixed: list[Event]) -> None:
    times = sorted(event.created_at or "" for event in mixed)
    middle = times[len(times) // 2]
    cases: list[tuple[ThreadFilter, Callable[[tuple[str, str], dict[str, Any]], bool]]] = [
        (ThreadFilter("acme"), lambda key, row: key[0] == "acme"),
        (ThreadFilter("acme", decision="DENY"), lambda key, row: key[0] == "acme" and row["denied"] > 0),
        (ThreadFilter(None, decision="ALLOW"), lambda key, row: row["allowed"] > 0),
        (ThreadFilter(None, decision="error"), lambda key, row: row["errors"] > 0),
        (
            ThreadFilter(None, decision="pending"),
            lambda key, row: row["turns"] > row["allowed"] + row["denied"],
        ),
        (ThreadFilter("globex", q="-3"), lambda key, row: key[0] == "globex" and "-3" in key[1]),
        (ThreadFilter(None, q="%"), lambda key, row: "%" in key[1]),  # LIKE wildcards are literal
        (ThreadFilter(None, actor="actor-1"), _actor_in(store, "actor-1")),
        (ThreadFilter(None, since=middle), lambda key, row: row["last_at"] >= middle),
        (ThreadFilter(None, until=middle), lambda key, row: row["first_at"] <= middle),
        (ThreadFilter("nobody"), lambda key, row: False),
    ]
    for wanted, keep in cases:
        expected = _expected_threads(store, keep)
        walked, total = _keyset_walk(store, wanted, 2)
        assert walked == expected and total == len(expected), wanted
    assert _expected_threads(store, _actor_in(store, "actor-1")) != _expected_threads(
        store, lambda k, r: True
    )


def test_a_thread_page_names_its_actors(store: LedgerStore, mixed: list[Event]) -> None:
    actors = recompute(store)["actors"]
    with store.read_connection() as conn:
        page = list_threads(conn, ThreadFilter(None), limit=100)
    for row in page.threads:
        names = sorted(
            actor
            for tenant, thread, actor in actors
            if (tenant, thread) == (row.tenant_id or "", row.thread_id)
        )
        assert row.actors == names[: len(row.actors)] and row.actor_count == len(names)


def test_the_thread_count_is_exact_up_to_its_cap(
    store: LedgerStore, mixed: list[Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At, just under and just over the cap: exact up to it, a lower bound past it; the pages
    themselves never depend on the cap."""
    from turngate.ledger import thread_list

    everything = _expected_threads(store, lambda key, row: True)
    for cap, total, exact in (
        (len(everything) + 1, len(everything), True),
        (len(everything), len(everything), True),
        (len(everything) - 1, len(everything) - 1, False),
    ):
        monkeypatch.setattr(thread_list, "COUNT_CAP", cap)
        with store.read_connection() as conn:
            page = list_threads(conn, ThreadFilter(None), limit=len(everything))
        assert (page.total, page.total_exact) == (total, exact), cap
        assert len(page.threads) == len(everything)


def test_a_filter_every_event_passes_pages_like_none_until_one_does_not(store: LedgerStore) -> None:
    """One tenant, one stream: the filtered log is the log (paged by index); once another
    tenant's event lands the same filter skips it, and positions stay gapless."""
    from tests.ledger.summaries import turn_drafts

    for n in range(5):
        store.append_many(turn_drafts(n, thread=f"t-{n % 2}", tenant="acme"))
    everything = all_events(store)
    for offset in (0, 3, len(everything) - 1, len(everything)):
        assert store.snapshot(offset=offset, limit=4, tenant_id="acme") == (
            len(everything),
            everything[offset : offset + 4],
        )
    store.append_many(turn_drafts(0, thread="t-0", tenant="globex", outcome="DENY"))
    store.append_many(turn_drafts(9, thread="t-1", tenant="acme"))
    acme = [event for event in all_events(store) if event.tenant_id == "acme"]
    for offset in range(len(acme) + 1):
        assert store.snapshot(offset=offset, limit=4, tenant_id="acme") == (
            len(acme),
            acme[offset : offset + 4],
        )


@pytest.mark.parametrize(
    ("decision", "index"), [("DENY", "ix_thread_summary_denied"), ("error", "ix_thread_summary_errors")]
)
def test_sparse_decision_filters_walk_their_own_partial_index(
    store: LedgerStore, mixed: list[Event], decision: str, index: str
) -> None:
    """DENY and error: the walk reads the partial index of the threads that pass (so a filter few
    threads pass does not read the whole summary)."""
    from sqlalchemy import event

    seen: list[tuple[str, Any]] = []

    def keep(_conn: object, _cursor: object, statement: str, parameters: Any, *_args: object) -> None:
        seen.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", keep)
    try:
        with store.read_connection() as conn:
            list_threads(conn, ThreadFilter("acme", decision=decision), limit=2)
    finally:
        event.remove(store.engine, "before_cursor_execute", keep)
    [(statement, parameters)] = [(s, p) for s, p in seen if "newest" in s]
    with store.read_connection() as conn:
        if store.dialect == "sqlite":
            plan = " ".join(
                str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            )
        else:
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            plan = str(conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {statement}", parameters).scalar_one())
    assert index in plan, plan
