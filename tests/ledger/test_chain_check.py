"""verify_ledger recomputes, reports every problem, and never repairs."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from tests.ledger.helpers import RawDb, draft
from turngate.core.canonical import canonical_bytes
from turngate.core.events import EventKind, event_digest
from turngate.ledger import LedgerStore, ProblemKind, VerifyReport, verify_ledger
from turngate.ledger.chain_check import recompute_digest


def _fill(store: LedgerStore, n: int, *, threads: int = 1) -> None:
    store.append_many([draft(f"c-{i}", thread_id=f"thread-{i % threads}") for i in range(n)])


def _kinds(report: VerifyReport) -> list[tuple[str, int]]:
    return [(p.kind.value, p.index) for p in report.problems]


def test_valid_ledger(store: LedgerStore) -> None:
    _fill(store, 30, threads=3)
    report = verify_ledger(store)
    assert report.ok
    assert report.checked == 30
    assert report.head_index == 29
    assert report.head_digest == store.head()[1]
    assert report.problems == []


def test_empty_ledger(store: LedgerStore) -> None:
    report = verify_ledger(store)
    assert report.model_dump() == {
        "ok": True,
        "checked": 0,
        "thread_id": None,
        "head_index": None,
        "head_digest": None,
        "problems": [],
    }


def test_streams_every_event_in_batches(store: LedgerStore) -> None:
    _fill(store, 2_500)
    seen: list[int] = []
    report = verify_ledger(store, progress=seen.append, batch_size=300)
    assert report.ok
    assert report.checked == 2_500
    assert seen == [*range(300, 2_500, 300), 2_500]


def test_recomputes_instead_of_trusting_the_digest_column(store: LedgerStore) -> None:
    _fill(store, 3)
    for row_event in store.snapshot()[1]:
        with store.read_connection() as conn:
            row = (
                conn.execute(text('SELECT * FROM events WHERE "index" = :i'), {"i": row_event.index})
                .mappings()
                .one()
            )
        assert recompute_digest(row) == row_event.digest


def test_tampered_payload_is_reported_not_repaired(store: LedgerStore, db: RawDb) -> None:
    _fill(store, 6)
    db.drop_append_only_triggers()
    db.execute(
        'UPDATE events SET payload = :payload WHERE "index" = 2',
        {"payload": canonical_bytes({"message": "forged"}).decode()},
    )
    before = db.dump()
    report = verify_ledger(store)
    assert not report.ok
    # Event 2 no longer matches its digest, and event 3's link no longer matches event 2.
    assert _kinds(report) == [("digest_mismatch", 2), ("chain_break", 3)]
    mismatch = report.problems[0]
    assert mismatch.found == store.get(2).digest  # type: ignore[union-attr]
    assert mismatch.expected != mismatch.found
    assert db.dump() == before
    assert verify_ledger(store).problems == report.problems


def test_tampered_obs_part_is_not_a_problem(store: LedgerStore, db: RawDb) -> None:
    store.append(draft("c-1", payload={"message": "m", "_obs": {"latency_ms": 3}}))
    db.drop_append_only_triggers()
    db.execute(
        "UPDATE events SET payload = :payload, created_at = 'later'",
        {"payload": canonical_bytes({"message": "m", "_obs": {"latency_ms": 999}}).decode()},
    )
    assert verify_ledger(store).ok


def test_resealed_forgery_breaks_the_chain_at_the_next_event(store: LedgerStore, db: RawDb) -> None:
    _fill(store, 5)
    original = store.get(1)
    assert original is not None
    forged = original.model_copy(update={"payload": {"message": "forged"}})
    forged_digest = event_digest(forged, 1, original.prev_event_digest)
    db.drop_append_only_triggers()
    db.execute(
        'UPDATE events SET payload = :payload, digest = :digest WHERE "index" = 1',
        {"payload": json.dumps(forged.payload), "digest": forged_digest},
    )
    report = verify_ledger(store)
    assert _kinds(report) == [("chain_break", 2)]
    assert report.problems[0].expected == forged_digest
    assert report.problems[0].found == original.digest


def test_broken_link_is_reported(store: LedgerStore, db: RawDb) -> None:
    _fill(store, 5)
    db.drop_append_only_triggers()
    relink = 'UPDATE events SET prev_event_digest = :link WHERE "index" = :index'
    db.execute(relink, {"link": "sha256:" + "0" * 64, "index": 3})
    db.execute(relink, {"link": "sha256:" + "1" * 64, "index": 0})
    report = verify_ledger(store)
    # The link is part of the digest scope: each edited row also stops matching its digest,
    # and event 4 no longer links to the (recomputed) event 3.
    assert _kinds(report) == [
        ("chain_break", 0),
        ("digest_mismatch", 0),
        ("chain_break", 1),
        ("chain_break", 3),
        ("digest_mismatch", 3),
        ("chain_break", 4),
    ]


def test_gaps_are_reported(store: LedgerStore, db: RawDb) -> None:
    _fill(store, 10)
    db.drop_append_only_triggers()
    db.execute('DELETE FROM events WHERE "index" IN (0, 4, 5, 6)')
    before = db.dump()
    report = verify_ledger(store)
    assert _kinds(report) == [("index_gap", 0), ("index_gap", 4)]
    assert "4..6" in report.problems[1].detail
    assert report.checked == 6
    assert db.dump() == before


def test_unreadable_payload_is_a_digest_mismatch(store: LedgerStore, db: RawDb) -> None:
    _fill(store, 3)
    db.drop_append_only_triggers()
    db.execute("UPDATE events SET payload = 'not json' WHERE \"index\" = 1")
    db.execute("UPDATE events SET kind = 'BOGUS' WHERE \"index\" = 2")
    report = verify_ledger(store)
    assert _kinds(report) == [("digest_mismatch", 1), ("digest_mismatch", 2)]
    assert "not valid JSON" in report.problems[0].detail


def test_duplicates_are_reported(store: LedgerStore, db: RawDb) -> None:
    _fill(store, 4)
    # Rebuild the table without its constraints, then duplicate an index and a key.
    db.drop_append_only_triggers()
    db.execute_all(
        [
            "CREATE TABLE events_copy AS SELECT * FROM events",
            "DROP TABLE events",
            "ALTER TABLE events_copy RENAME TO events",
            'INSERT INTO events SELECT * FROM events WHERE "index" = 2',
        ]
    )
    report = verify_ledger(store)
    assert ("duplicate", 2) in _kinds(report)
    kinds = {p.kind for p in report.problems}
    assert kinds == {ProblemKind.DUPLICATE}
    assert any("already recorded at index 2" in p.detail for p in report.problems)


def test_thread_mode_checks_the_thread_and_its_links(store: LedgerStore, db: RawDb) -> None:
    _fill(store, 12, threads=3)  # thread-0: 0, 3, 6, 9; thread-1: 1, 4, 7, 10; ...
    report = verify_ledger(store, thread_id="thread-1", batch_size=2)
    assert report.ok
    assert report.checked == 4
    assert report.head_index == 10

    db.drop_append_only_triggers()
    # Tamper with an event of another thread: thread-1's event 7 links to it.
    db.execute('UPDATE events SET payload = \'{"message":"x"}\' WHERE "index" = 6')
    db.execute('DELETE FROM events WHERE "index" = 3')
    report = verify_ledger(store, thread_id="thread-1")
    assert _kinds(report) == [("index_gap", 3), ("chain_break", 7)]
    # thread-2 (2, 5, 8, 11) links to 1, 4, 7, 10: all intact.
    assert verify_ledger(store, thread_id="thread-2").ok
    # thread-0 lost event 3 (not seen from the thread itself) and holds the tampered event 6.
    assert _kinds(verify_ledger(store, thread_id="thread-0")) == [("digest_mismatch", 6)]
    assert _kinds(verify_ledger(store)) == [
        ("index_gap", 3),
        ("digest_mismatch", 6),
        ("chain_break", 7),
    ]


@pytest.mark.parametrize("thread_id", [None, "thread-0"])
def test_verify_never_writes(store: LedgerStore, db: RawDb, thread_id: str | None) -> None:
    _fill(store, 5)
    marker = store.change_marker()
    verify_ledger(store, thread_id=thread_id)
    assert store.change_marker() == marker
    assert [e.kind for e in store.snapshot()[1]] == [EventKind.INTENT] * 5
