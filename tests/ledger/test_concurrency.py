"""Concurrent appends from threads and from several processes: no gaps, no duplicates, valid chain."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from tests.ledger.helpers import append_worker, draft, open_worker, process_context
from turngate.core.events import Event
from turngate.ledger import LedgerStore, verify_ledger


def _assert_contiguous_valid_log(store: LedgerStore, expected: int) -> list[Event]:
    total, events = store.snapshot(limit=1000)
    assert total == expected
    assert [e.index for e in events] == list(range(expected))
    keys = Counter((e.correlation_id, e.kind) for e in events)
    assert max(keys.values()) == 1
    report = verify_ledger(store)
    assert report.ok, report.problems
    assert report.checked == expected
    return events


def test_threads_append_without_gaps_or_duplicates(store: LedgerStore) -> None:
    workers, per_worker = 12, 20
    start = threading.Barrier(workers)

    def work(worker: int) -> list[int]:
        start.wait()
        indexes = []
        for i in range(per_worker):
            indexes.append(store.append(draft(f"t{worker}-{i}", thread_id=f"th-{worker}")).index)
            # Every worker also retries the same shared events (idempotency under contention).
            indexes.append(store.append(draft(f"shared-{i % 5}", thread_id="shared")).index)
        return indexes

    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(work, range(workers)))

    events = _assert_contiguous_valid_log(store, workers * per_worker + 5)
    by_key = {e.correlation_id: e.index for e in events}
    for worker, indexes in enumerate(results):
        own = indexes[0::2]
        assert own == [by_key[f"t{worker}-{i}"] for i in range(per_worker)]
        assert own == sorted(own)
        assert indexes[1::2] == [by_key[f"shared-{i % 5}"] for i in range(per_worker)]


def test_threads_sharing_two_store_instances(ledger_url: str) -> None:
    first, second = LedgerStore(ledger_url), LedgerStore(ledger_url)
    try:
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit((first, second)[i % 2].append, draft(f"c-{i // 2}")) for i in range(120)]
            events = [f.result() for f in futures]
        assert len({e.index for e in events}) == 60
        _assert_contiguous_valid_log(first, 60)
    finally:
        first.close()
        second.close()


def test_processes_append_without_gaps_or_duplicates(ledger_url: str) -> None:
    url = ledger_url
    processes, per_process, shared = 4, 40, 10
    context = process_context()
    with context.Pool(processes) as pool:
        # The store is opened (and migrated) inside each process at nearly the same moment.
        results = pool.starmap(
            append_worker, [(url, worker, per_process, shared) for worker in range(processes)]
        )

    with LedgerStore(url) as store:
        events = _assert_contiguous_valid_log(store, processes * per_process + shared)
        by_key = {e.correlation_id: e.index for e in events}
    for result in results:
        for correlation_id, index in result:
            assert by_key[correlation_id] == index


def test_processes_opening_a_fresh_ledger_at_once(ledger_url: str) -> None:
    """Several processes open (and so migrate) the same brand-new ledger at the same moment."""
    url = ledger_url
    context = process_context()
    with context.Pool(3) as pool:
        heads = pool.map(open_worker, [url] * 3)
    assert {count for count, _ in heads} == {1}
    with LedgerStore(url) as store:
        _assert_contiguous_valid_log(store, 1)
