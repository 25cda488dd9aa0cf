"""A PostgreSQL ledger that crashes (SIGKILL of the postmaster) and restarts under load: the API
answers 503 `ledger.unavailable` with Retry-After (never 500), logs one line per outage, /healthz
says the ledger is down, and every acknowledged turn still ends exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.ledger.postgres import ThrowawayCluster, find_binaries
from tests.stack import envelope, make_settings, running_stack
from turngate.ledger import LedgerStore, verify_ledger

CLIENTS = 3
OUTAGE_S = 4.0


@pytest.fixture
def crashable_cluster() -> Iterator[ThrowawayCluster]:
    """A PostgreSQL cluster of this test's own (the shared server must never be killed)."""
    bin_dir, where = find_binaries()
    if bin_dir is None:
        pytest.skip(f"no initdb/pg_ctl (looked in {where}): cannot crash a throwaway PostgreSQL")
    cluster = ThrowawayCluster(bin_dir, crash_safe=True)
    try:
        cluster.start()
    except RuntimeError as exc:
        cluster.stop()
        pytest.skip(f"a throwaway PostgreSQL cluster could not start: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


async def _until(check, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def test_ledger_crash_under_load_answers_503_and_every_acknowledged_turn_ends_once(
    tmp_path, temporal_server, crashable_cluster: ThrowawayCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="turngate")
    url = f"postgresql+psycopg://postgres@127.0.0.1:{crashable_cluster.port}/postgres"
    settings = make_settings(tmp_path, temporal_server.address, ledger_url=url)
    answers: list[tuple[int, str | None, str | None]] = []
    acknowledged: set[str] = set()
    stop = asyncio.Event()

    async with running_stack(settings) as stack:

        async def client(n: int) -> None:
            i = 0
            while not stop.is_set():
                correlation_id = f"c-{n}-{i}"
                i += 1
                with contextlib.suppress(Exception):  # a request cut by the test's end
                    resp = await stack.http.post(
                        "/ingress/intent",
                        json=envelope("hi", correlation_id=correlation_id, thread_id=f"t-{n}-{i}"),
                    )
                    answers.append(
                        (resp.status_code, resp.json().get("reason_code"), resp.headers.get("retry-after"))
                    )
                    if resp.status_code == 202:
                        acknowledged.add(correlation_id)
                await asyncio.sleep(0.05)

        async def health() -> tuple[int, dict]:
            resp = await stack.http.get("/healthz")
            return resp.status_code, resp.json()

        assert (await health())[0] == 200
        clients = [asyncio.create_task(client(n)) for n in range(CLIENTS)]
        await _until(lambda: _true(len(acknowledged) >= 3), 60, "turns before the crash")

        await asyncio.to_thread(crashable_cluster.crash)
        await _until(lambda: _true(any(a[0] == 503 for a in answers)), 30, "a 503 during the outage")
        status, body = await health()
        assert status == 503 and body["reason_code"] == "ledger.unavailable" and body["ledger"] == "down"
        # Every other ledger read on a request path answers the same way.
        for path in ("/snapshot", "/status", "/verify"):
            resp = await stack.http.get(path)
            assert resp.status_code == 503, (path, resp.text)
            assert resp.json()["reason_code"] == "ledger.unavailable"
            assert int(resp.headers["retry-after"]) >= 1
        await asyncio.sleep(OUTAGE_S)

        await asyncio.to_thread(crashable_cluster.restart)
        await _until(lambda: _ok(health), 60, "/healthz to report the ledger up again")
        before = len(acknowledged)
        await _until(lambda: _true(len(acknowledged) >= before + 3), 60, "turns after the restart")
        stop.set()
        await asyncio.gather(*clients)

        statuses = Counter(status for status, _, _ in answers)
        assert set(statuses) <= {202, 503}, statuses
        assert statuses[503] >= 1
        refused = [a for a in answers if a[0] == 503]
        assert {code for _, code, _ in refused} == {"ledger.unavailable"}, refused
        assert all(retry_after and int(retry_after) >= 1 for _, _, retry_after in refused)

        # Every acknowledged turn ends exactly once (INTENT, DECISION, EXECUTION: one of each).
        with LedgerStore(url) as store:

            def ended() -> bool:
                return all(len(store.by_correlation(c)) == 3 for c in acknowledged)

            await _until(lambda: asyncio.to_thread(ended), 120, "every acknowledged turn to end")
            for correlation_id in acknowledged:
                kinds = sorted(str(e.kind) for e in store.by_correlation(correlation_id))
                assert kinds == ["DECISION", "EXECUTION", "INTENT"], (correlation_id, kinds)
            assert verify_ledger(store).ok

    api_records = [r for r in caplog.records if r.name == "turngate.api.ledger_outage"]
    down = [r for r in api_records if "ledger unavailable" in r.getMessage()]
    up = [r for r in api_records if "ledger available again" in r.getMessage()]
    assert len(down) == 1 and len(up) == 1, [r.getMessage() for r in api_records]
    tracebacks = [r for r in caplog.records if r.name.startswith("turngate.api") and r.exc_info]
    assert not tracebacks, [r.getMessage() for r in tracebacks]


async def _true(value: bool) -> bool:
    return value


async def _ok(health) -> bool:
    with contextlib.suppress(Exception):
        return (await health())[0] == 200
    return False
