"""Partitions between turngate and its PostgreSQL ledger: the network stops passing packets (a
:class:`PartitionProxy` frozen mid-turn), nothing fails fast, and still no call hangs past
``TURNGATE_LEDGER_TIMEOUT_S``, a silent writer does not keep the write lock, every turn ends once,
and the chain verifies. Needs PostgreSQL (skipped loudly without one)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from tests.faults.partition_proxy import PartitionProxy
from tests.faults.partitions import (
    duplicates,
    ended_once,
    outcomes,
    split_stack,
    twin_settings,
    until,
    verified,
)
from tests.ledger.helpers import draft
from tests.processes import LONG_MESSAGE
from turngate.ledger import LedgerStore, LedgerUnavailableError
from turngate.ledger.engine import PG_WRITE_LOCK_KEY, create_ledger_engine

BOUND_S = 1.0
#: What tells a bounded call from a hung one: without the bound, a call on a frozen network never
#: returns. Far above the bound, so a loaded machine cannot turn it red; how soon calls end is
#: measured by bench/faults.py, not asserted here.
HANG_S = 30.0


@pytest.fixture
def pg_url(postgres_server) -> Iterator[str]:
    with postgres_server.fresh_database() as url:
        yield url


@pytest.fixture
def proxy(pg_url: str) -> Iterator[PartitionProxy]:
    url = make_url(pg_url)
    proxy = PartitionProxy((url.host or "127.0.0.1", url.port or 5432))
    try:
        yield proxy
    finally:
        proxy.close()


def test_a_ledger_call_on_a_silent_network_fails_within_the_bound(pg_url: str, proxy: PartitionProxy) -> None:
    with LedgerStore(proxy.route(pg_url), timeout_s=BOUND_S) as store:
        store.append(draft("c-before"))
        proxy.freeze()
        for attempt in range(2):  # a pooled connection, then a new one: both bounded
            started = time.monotonic()
            with pytest.raises(LedgerUnavailableError):
                store.append(draft(f"c-during-{attempt}"))
            assert time.monotonic() - started < HANG_S
        proxy.heal()
        store.append(draft("c-after"))
        assert [e.correlation_id for e in store.snapshot()[1]] == ["c-before", "c-after"]
        assert verified(store)


def test_a_writer_cut_off_inside_its_transaction_gives_the_write_lock_back(
    pg_url: str, proxy: PartitionProxy
) -> None:
    """The server ends a session idle in its transaction after the bound: the ledger's write lock
    it held goes to the next writer instead of waiting for a client that may never return."""
    silent = create_ledger_engine(proxy.route(pg_url), timeout_s=BOUND_S)
    try:
        with LedgerStore(pg_url) as store:
            conn = silent.connect()
            conn.begin()
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_WRITE_LOCK_KEY})
            proxy.freeze()
            started = time.monotonic()
            store.append(draft("c-next-writer"))  # waits for the lock, up to the bound
            waited = time.monotonic() - started
            assert BOUND_S * 0.5 < waited < HANG_S, waited  # it waited for the lock, then got it
            proxy.heal()
            with pytest.raises(Exception):  # noqa: B017 - the server ended that session
                conn.execute(text("SELECT 1"))
            conn.close()
            assert verified(store)
    finally:
        silent.dispose()


@pytest.mark.parametrize(
    ("partition_s", "ledger_wait_s", "ended"),
    [(2.5, 120.0, "EXECUTION"), (7.0, 1.0, "SYSTEM_ERROR")],
    ids=["heals-before-the-wait-ends", "the-wait-ends-first"],
)
async def test_worker_cut_off_from_the_ledger_mid_turn_ends_every_turn_once(
    tmp_path,
    temporal_server,
    pg_url: str,
    proxy: PartitionProxy,
    partition_s: float,
    ledger_wait_s: float,
    ended: str,
) -> None:
    """The worker's road to PostgreSQL freezes while turns are inside their provider calls (the
    API still reads it directly); past the bound the worker's calls fail and are retried, the
    answers in hand, for TURNGATE_LEDGER_WAIT_S. Healed first: each turn records its EXECUTION
    once; the wait over first: each records SYSTEM_ERROR once the ledger answers. bench/faults.py
    runs the same for 30 s and 3 min."""
    side = twin_settings(tmp_path, temporal_server.address, echo_delay_ms=150)
    api = side(ledger_url=pg_url)
    worker = side(ledger_url=proxy.route(pg_url), ledger_timeout_s=BOUND_S, ledger_wait_s=ledger_wait_s)
    ids = [f"c-pg-{i}" for i in range(3)]
    async with split_stack(api, worker) as stack:
        with LedgerStore(pg_url) as store:
            for correlation_id in ids:
                resp = await stack.chat(LONG_MESSAGE, correlation_id=correlation_id, wait="decision")
                assert resp.status_code == 202, resp.text
            proxy.freeze()
            await asyncio.sleep(partition_s)  # longer than the bound: calls fail and are retried
            assert all(len(store.by_correlation(c)) == 2 for c in ids)
            proxy.heal()
            await until(lambda: ended_once(store, ids), 60, "every turn to end after healing")
            ends = outcomes(store, ids)
            # A step whose round trip was still in flight at the healing may yet succeed.
            assert ends[ended] >= 1 and set(ends) <= {"EXECUTION", ended}, ends
            # The worker's threads are free: a new turn goes straight through.
            resp = await stack.chat("after", correlation_id="c-pg-after")
            assert resp.json()["execution"]["payload"]["output_text"] == "echo: after"
            assert duplicates(store) == []
            assert verified(store)


async def test_api_cut_off_from_the_ledger_answers_503_within_the_bound(
    tmp_path, temporal_server, pg_url: str, proxy: PartitionProxy
) -> None:
    """The API's road to PostgreSQL freezes: every read answers 503 ``ledger.unavailable`` with
    Retry-After within the bound, many at once (no request slot hangs), and all is well healed."""
    side = twin_settings(tmp_path, temporal_server.address)
    api = side(ledger_url=proxy.route(pg_url), ledger_timeout_s=BOUND_S)
    worker = side(ledger_url=pg_url)
    async with split_stack(api, worker) as stack:
        assert (await stack.chat("before", correlation_id="c-api-before")).status_code == 202
        proxy.freeze()
        started = time.monotonic()
        paths = ["/healthz", "/snapshot", "/status", "/verify"] * 3
        answers = await asyncio.gather(*(stack.http.get(path) for path in paths))
        refused = await stack.chat("during", correlation_id="c-api-during")
        elapsed = time.monotonic() - started
        for path, resp in zip(paths, answers, strict=True):
            assert resp.status_code == 503, (path, resp.text)
            assert resp.json()["reason_code"] == "ledger.unavailable"
            assert int(resp.headers["retry-after"]) >= 1
        assert refused.status_code == 503 and refused.json()["reason_code"] == "ledger.unavailable"
        assert elapsed < HANG_S, elapsed  # answered, not hung
        proxy.heal()

        async def healthy() -> bool:
            return (await stack.http.get("/healthz")).status_code == 200

        deadline = time.monotonic() + 30
        while not await healthy():
            assert time.monotonic() < deadline, "the API never saw the ledger again"
            await asyncio.sleep(0.3)
        retried = await stack.chat("during", correlation_id="c-api-during")
        assert retried.json()["execution"]["payload"]["output_text"] == "echo: during"
        with LedgerStore(pg_url) as store:
            assert ended_once(store, ["c-api-before", "c-api-during"])
            assert duplicates(store) == []
            assert verified(store)


def test_a_long_statement_is_ended_by_the_bound_after_a_migration(pg_url: str) -> None:
    """The server ends a statement past the bound. The store's migration of this fresh database
    ran with the bound lifted (a backfill may rightly run long): for its transaction only."""
    with LedgerStore(pg_url, timeout_s=BOUND_S) as store, store.engine.connect() as conn:
        setting = "SELECT extract(epoch FROM current_setting('statement_timeout')::interval)"
        assert float(conn.exec_driver_sql(setting).scalar()) == BOUND_S
        started = time.monotonic()
        with pytest.raises(Exception, match=r"statement timeout|did not answer"):
            conn.exec_driver_sql("SELECT pg_sleep(5)")  # raising at all is the bound: it ends
        assert time.monotonic() - started < HANG_S
