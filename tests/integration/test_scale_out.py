"""Several workers and API replicas on one Temporal server and one PostgreSQL ledger."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx

from tests.processes import spawn, wait_http
from tests.stack import envelope, make_settings
from turngate.devserver import free_port
from turngate.ledger import LedgerStore, verify_ledger

TURNS = 40


async def test_two_workers_two_apis_one_postgres_ledger(tmp_path, temporal_server, postgres_server) -> None:
    ledger_url = postgres_server.create_database()
    settings = make_settings(tmp_path, temporal_server.address, echo_delay_ms=30, llm_concurrency=4)
    extra = {"TURNGATE_LEDGER_URL": ledger_url, "TURNGATE_LLM_CONCURRENCY": "4"}
    ports = [free_port(), free_port()]
    procs = {
        "worker-a": spawn(["worker"], settings, tmp_path / "worker-a.log", **extra),
        "worker-b": spawn(["worker"], settings, tmp_path / "worker-b.log", **extra),
        **{
            f"api-{port}": spawn(
                ["serve", "--port", str(port)], settings, tmp_path / f"api-{port}.log", **extra
            )
            for port in ports
        },
    }
    store = None
    try:
        for port in ports:
            await asyncio.to_thread(wait_http, f"http://127.0.0.1:{port}/healthz", 60)
        store = LedgerStore(ledger_url)

        async def submit(i: int) -> int:
            port = ports[i % 2]
            body = envelope(
                f"turn number {i} of the scale-out test", correlation_id=f"c-{i}", thread_id=f"t-{i % 8}"
            )
            async with httpx.AsyncClient(timeout=120) as http:
                resp = await http.post(f"http://127.0.0.1:{port}/ingress/intent", json=body)
            return resp.status_code

        tasks = [asyncio.create_task(submit(i)) for i in range(TURNS)]
        await asyncio.sleep(1.0)
        procs["worker-a"].send_signal(signal.SIGKILL)  # mid-run
        assert all(code == 202 for code in await asyncio.gather(*tasks))

        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            done = sum(1 for i in range(TURNS) if len(store.by_correlation(f"c-{i}")) == 3)
            if done == TURNS:
                break
            await asyncio.sleep(0.5)
        for i in range(TURNS):
            assert [str(e.kind) for e in store.by_correlation(f"c-{i}")] == [
                "INTENT",
                "DECISION",
                "EXECUTION",
            ], i
        length, _ = store.head()
        assert length == 3 * TURNS
        report = verify_ledger(store)
        assert report.ok, report.problems
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in procs.values():
            proc.wait(20)
        if store is not None:
            store.close()
        postgres_server.drop_database(ledger_url)
