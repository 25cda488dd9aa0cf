"""Read paths: snapshot, since/last, head, change_marker, fetch_ref_candidates (+ query plans)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from tests.ledger.helpers import append_worker, draft, process_context, sqlite_url
from tests.ledger.postgres import PostgresServer
from turngate.core.events import EventKind
from turngate.ledger import MAX_PAGE, LedgerStore


@pytest.fixture
def mixed(store: LedgerStore) -> LedgerStore:
    """24 events: streams s0/s1 alternate, lanes a/b/c cycle, threads t0..t3."""
    store.append_many(
        [
            draft(
                f"c-{i}",
                thread_id=f"t{i % 4}",
                stream_id=f"s{i % 2}",
                lane="abc"[i % 3],
            )
            for i in range(24)
        ]
    )
    return store


# ------------------------------------------------------------------ snapshot


def test_snapshot_unfiltered(mixed: LedgerStore) -> None:
    total, page = mixed.snapshot(offset=5, limit=3)
    assert total == 24
    assert [e.index for e in page] == [5, 6, 7]


def test_snapshot_filters_and_positional_offset(mixed: LedgerStore) -> None:
    total, page = mixed.snapshot(stream_id="s1", lane="b")  # i odd and i % 3 == 1
    assert total == 4
    assert [e.index for e in page] == [1, 7, 13, 19]
    total, page = mixed.snapshot(stream_id="s1", lane="b", offset=1, limit=2)
    assert total == 4  # the length of the filtered result, not of the page
    assert [e.index for e in page] == [7, 13]
    total, page = mixed.snapshot(thread_id="t2", offset=4)
    assert total == 6
    assert [e.index for e in page] == [18, 22]
    total, page = mixed.snapshot(thread_id="t2", stream_id="s1")
    assert (total, page) == (0, [])
    total, page = mixed.snapshot(lane="c", offset=100)
    assert (total, page) == (8, [])


def test_snapshot_limit_is_capped(store: LedgerStore) -> None:
    store.append_many([draft(f"c-{i}") for i in range(MAX_PAGE + 20)])
    total, page = store.snapshot(limit=10**6)
    assert total == MAX_PAGE + 20
    assert len(page) == MAX_PAGE
    assert store.snapshot(limit=0)[1] == []
    assert store.snapshot(limit=-5)[1] == []
    assert [e.index for e in store.snapshot(offset=-3, limit=2)[1]] == [0, 1]


# ------------------------------------------------------------------ since / last / head


def test_since_and_last(mixed: LedgerStore) -> None:
    assert [e.index for e in mixed.since(20)] == [21, 22, 23]
    assert [e.index for e in mixed.since(-1, limit=2)] == [0, 1]
    assert mixed.since(23) == []
    assert [e.index for e in mixed.since(10, stream_id="s0")] == [12, 14, 16, 18, 20, 22]
    assert [e.index for e in mixed.since(10, lanes=["a", "c"], stream_id="s1")] == [11, 15, 17, 21, 23]
    assert mixed.since(0, lanes=[]) == []
    assert [e.index for e in mixed.last(3)] == [21, 22, 23]
    assert [e.index for e in mixed.last(2, stream_id="s1", lanes=["b"])] == [13, 19]
    assert [e.index for e in mixed.last(100)] == list(range(24))
    assert mixed.last(0) == []


def test_head(store: LedgerStore) -> None:
    assert store.head() == (0, None)
    first = store.append(draft("c-1"))
    assert store.head() == (1, first.digest)
    second = store.append(draft("c-2"))
    assert store.head() == (2, second.digest)
    store.append(draft("c-1"))  # an idempotent retry adds nothing
    assert store.head() == (2, second.digest)


def test_change_marker_moves_on_commits_from_anywhere(store: LedgerStore, ledger_url: str) -> None:
    marker = store.change_marker()
    assert store.change_marker() == marker
    store.append(draft("own"))
    after_own = store.change_marker()
    assert after_own != marker
    with LedgerStore(ledger_url) as other:
        other.append(draft("other-store"))
    after_other = store.change_marker()
    assert after_other != after_own
    context = process_context()
    process = context.Process(target=append_worker, args=(ledger_url, 9, 1, 0))
    process.start()
    process.join(30)
    assert process.exitcode == 0
    after_process = store.change_marker()
    assert after_process != after_other
    assert store.change_marker() == after_process


# ------------------------------------------------------------------ fetch_ref_candidates


@pytest.fixture
def refs_ledger(store: LedgerStore) -> LedgerStore:
    """Two turns in thread A (INTENT/DECISION/EXECUTION each), one turn in thread B."""
    for thread, turn, corr in (
        ("A", "turn-1", "corr-1"),
        ("A", "turn-2", "corr-2"),
        ("B", "turn-9", "corr-9"),
    ):
        for kind in EventKind:
            store.append(draft(corr, kind, thread_id=thread, turn_id=turn, payload={"k": str(kind)}))
    # Thread B reuses the turn id "turn-1" (turn ids are only unique within a thread).
    store.append(draft("corr-b1", thread_id="B", turn_id="turn-1"))
    return store


def _indexes(events: list[Any]) -> list[int]:
    return [e.index for e in events]


def test_refs_by_correlation_turn_and_digest(refs_ledger: LedgerStore) -> None:
    assert _indexes(refs_ledger.fetch_ref_candidates("A", ["corr-2"])) == [3, 4, 5]
    assert _indexes(refs_ledger.fetch_ref_candidates("A", ["turn-1"])) == [0, 1, 2]
    digest = refs_ledger.get(4).digest  # type: ignore[union-attr]
    assert _indexes(refs_ledger.fetch_ref_candidates("A", [digest])) == [4]
    # Order follows the index, whatever the order of the refs; duplicates collapse.
    assert _indexes(refs_ledger.fetch_ref_candidates("A", [digest, "turn-1", "corr-2", "turn-1"])) == [
        0,
        1,
        2,
        3,
        4,
        5,
    ]
    assert refs_ledger.fetch_ref_candidates("A", []) == []


def test_cross_thread_refs_return_at_most_one_foreign_event(refs_ledger: LedgerStore) -> None:
    # corr-9 exists only in thread B: one event (the lowest index) so CROSS_THREAD_REF can be told.
    assert _indexes(refs_ledger.fetch_ref_candidates("A", ["corr-9"])) == [6]
    assert _indexes(refs_ledger.fetch_ref_candidates("A", ["turn-9"])) == [6]
    foreign_digest = refs_ledger.get(8).digest  # type: ignore[union-attr]
    assert _indexes(refs_ledger.fetch_ref_candidates("A", [foreign_digest])) == [8]
    # turn-1 matches in A, so B's turn-1 is not reported; from B it is the other way round.
    assert _indexes(refs_ledger.fetch_ref_candidates("A", ["turn-1", "corr-9"])) == [0, 1, 2, 6]
    assert _indexes(refs_ledger.fetch_ref_candidates("B", ["turn-1"])) == [9]
    assert _indexes(refs_ledger.fetch_ref_candidates("C", ["turn-1"])) == [0]
    assert refs_ledger.fetch_ref_candidates("A", ["nope"]) == []


@pytest.fixture(scope="module")
def big_ledger(
    backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LedgerStore]:
    """5,000 events: 100 threads x 50 events, the ref targets spread over the log."""
    server: PostgresServer | None = None
    if backend == "sqlite":
        url = sqlite_url(tmp_path_factory.mktemp("big") / "ledger.sqlite3")
    else:
        server = request.getfixturevalue("postgres_server")
        url = server.create_schema()
    store = LedgerStore(url)
    try:
        drafts = [
            draft(f"c-{i}", thread_id=f"thread-{i % 100}", turn_id=f"turn-{i // 100}") for i in range(5_000)
        ]
        store.append_many(drafts)
        if backend == "postgresql":
            with store.engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE events")  # planner statistics, as autovacuum would
        yield store
    finally:
        store.close()
        if server is not None:
            server.drop_schema(url)


class _Recorder:
    def __init__(self, store: LedgerStore) -> None:
        self.statements: list[tuple[str, Any]] = []
        self._store = store

    def __enter__(self) -> _Recorder:
        event.listen(self._store.engine, "before_cursor_execute", self._record)
        return self

    def __exit__(self, *_exc: object) -> None:
        event.remove(self._store.engine, "before_cursor_execute", self._record)

    def _record(self, _conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            self.statements.append((statement, parameters))


#: Indexes whose use would mean walking a thread, a stream or the whole log.
_WALKING_INDEXES = ("ix_events_thread_id_index", "ix_events_stream_id_lane_index", "pk_events")


def _record_lookup(store: LedgerStore) -> list[tuple[str, Any]]:
    """Run one fetch_ref_candidates on the big ledger; the SELECT statements it issued."""
    digest_ref = store.get(4_321).digest  # type: ignore[union-attr]  # thread-21
    refs = ["c-1234", "turn-7", digest_ref, "c-4999", "c-4321", "missing-ref", "c-1"]
    with _Recorder(store) as recorder:
        found = store.fetch_ref_candidates("thread-21", refs)
    # In thread-21: c-4321 (= the digest ref), turn-7 -> event 721. Elsewhere, one each:
    # c-1234 (thread-34), c-4999 (thread-99), c-1 (thread-1); missing-ref matches nothing.
    assert _indexes(found) == [1, 721, 1234, 4321, 4999]
    # One statement per lookup kind, plus one per ref missing from the thread (4 here).
    assert len(recorder.statements) == 3 + 4
    return recorder.statements


@pytest.mark.backends("sqlite")
def test_fetch_ref_candidates_on_5000_events_uses_index_lookups_only(big_ledger: LedgerStore) -> None:
    statements = _record_lookup(big_ledger)
    with big_ledger.read_connection() as conn:
        for statement, parameters in statements:
            plan = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters).all()
            details = [row[-1] for row in plan]
            assert not any(d.startswith("SCAN") for d in details), (statement, details)
            assert all("USING" in d for d in details if d.startswith("SEARCH")), details
            # Never walks the whole thread through the (thread_id, index) index.
            assert not any(name in d for d in details for name in _WALKING_INDEXES[:2]), details


def _plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _plan_nodes(child)


@pytest.mark.backends("postgresql")
def test_fetch_ref_candidates_plans_use_index_lookups_on_postgres(big_ledger: LedgerStore) -> None:
    """EXPLAIN of every statement: index lookups on the ref columns, never a scan or a walk.

    ``enable_seqscan = off`` makes the planner use an index wherever one can serve the query, so
    a statement that still plans a Seq Scan has no usable index; a walk of the primary key (or
    of a thread/stream index) with a filter would be a scan of the log in index order.
    """
    statements = _record_lookup(big_ledger)
    with big_ledger.read_connection() as conn:
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        for statement, parameters in statements:
            [plan] = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {statement}", parameters).scalar_one()
            nodes = list(_plan_nodes(plan["Plan"]))
            types = [node["Node Type"] for node in nodes]
            used = [node["Index Name"] for node in nodes if "Index Name" in node]
            assert "Seq Scan" not in types, (statement, types)
            assert used, (statement, types)
            assert not set(used) & set(_WALKING_INDEXES), (statement, used)


@pytest.mark.backends("sqlite", reason="counts SQLite VM steps; PostgreSQL: the EXPLAIN test above")
def test_fetch_ref_candidates_cost_does_not_grow_with_the_log(
    big_ledger: LedgerStore, tmp_path: Path
) -> None:
    """Same refs against 50 and 5,000 events: the SQLite VM does about the same work."""
    big = big_ledger
    with LedgerStore(f"sqlite:///{tmp_path / 'small.sqlite3'}") as small:
        small.append_many(
            [draft(f"c-{i}", thread_id=f"thread-{i % 100}", turn_id=f"turn-{i // 100}") for i in range(50)]
        )
        refs = ["c-21", "turn-0", "c-7", "missing"]
        small_steps = _vm_steps(small, "thread-21", refs)
        big_steps = _vm_steps(big, "thread-21", refs)
    # A scan of the thread (50 rows) or of the log (5,000 rows) would multiply the work.
    assert big_steps < small_steps * 2, (small_steps, big_steps)


def _vm_steps(store: LedgerStore, thread_id: str, refs: list[str]) -> int:
    """SQLite VM instructions (in units of 10) run by one call, on whichever pooled connection."""
    counter = {"n": 0}

    def count() -> int:
        counter["n"] += 1
        return 0

    def on_checkout(dbapi: Any, *_: Any) -> None:
        dbapi.set_progress_handler(count, 10)

    def on_checkin(dbapi: Any, *_: Any) -> None:
        dbapi.set_progress_handler(None, 10)

    event.listen(store.engine, "checkout", on_checkout)
    event.listen(store.engine, "checkin", on_checkin)
    try:
        store.fetch_ref_candidates(thread_id, refs)
    finally:
        event.remove(store.engine, "checkout", on_checkout)
        event.remove(store.engine, "checkin", on_checkin)
    return counter["n"]
