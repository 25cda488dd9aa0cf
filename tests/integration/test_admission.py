"""TURNGATE_TURN_QUEUE_MAX: beyond it ingress answers 503 queue.full and records nothing; slots
come back as turns finish, so the gateway recovers by itself."""

from __future__ import annotations

import asyncio

from tests.stack import make_settings, running_stack
from turngate.ledger import LedgerStore


async def _until(check, timeout_s: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_full_queue_refuses_and_records_nothing_then_recovers(tmp_path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address, turn_queue_max=2, echo_delay_ms=150)
    store = LedgerStore(settings.effective_ledger_url)
    try:
        async with running_stack(settings) as stack:
            accepted = [
                await stack.chat("slow one two", correlation_id=f"c-{n}", thread_id=f"t-{n}", wait=None)
                for n in range(2)
            ]
            assert [r.status_code for r in accepted] == [202, 202]
            refused = await stack.chat("one too many", correlation_id="c-refused", thread_id="t-x", wait=None)
            assert refused.status_code == 503
            assert refused.json()["reason_code"] == "queue.full"
            assert refused.headers["retry-after"] == "1"
            status = (await stack.http.get("/status")).json()
            assert status["job_runtime"]["admission"]["in_flight"] == 2
            assert status["job_runtime"]["admission"]["refused_total"] == 1

            async def drained() -> bool:
                admission = (await stack.http.get("/status")).json()["job_runtime"]["admission"]
                return admission["in_flight"] == 0

            await _until(drained, 30)
            again = await stack.chat("now there is room", correlation_id="c-later", thread_id="t-x")
            assert again.status_code == 202
            assert again.json()["execution"]["payload"]["output_text"] == "echo: now there is room"
            caps = (await stack.http.get("/capabilities")).json()
            assert caps["limits"]["turn_queue_max"] == 2
        assert store.by_correlation("c-refused") == []
        assert all(len(store.by_correlation(f"c-{n}")) == 3 for n in range(2))
    finally:
        store.close()


async def test_waiting_requests_release_their_slot(tmp_path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address, turn_queue_max=1)
    async with running_stack(settings) as stack:
        for n in range(3):  # each waits for its EXECUTION, so the one slot is free again
            resp = await stack.chat("hi", correlation_id=f"c-{n}", thread_id=f"t-{n}")
            assert resp.status_code == 202, resp.text
