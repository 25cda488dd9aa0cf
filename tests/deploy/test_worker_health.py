"""The worker's /healthz (readiness for orchestrators) beside /metrics: ok while the ledger and
Temporal answer; 503 with the reason when either does not (a ledger that raises, a Temporal
address that accepts connections and never answers), or when the check loop stopped."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import httpx
import pytest
from temporalio.client import Client

from turngate.devserver import DevServer
from turngate.telemetry import TurngateMetrics
from turngate.worker.health import WorkerHealth, serve_worker_endpoints


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server that accepts and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def _ledger_ok() -> int:
    return 0


def _ledger_down() -> int:
    raise ConnectionError("connection refused")


async def _get(address: tuple[str, int], path: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=f"http://{address[0]}:{address[1]}", timeout=10) as http:
        return await http.get(path)


async def test_healthy_then_each_dependency_down(temporal_server: DevServer, silent_server: str) -> None:
    client = await Client.connect(temporal_server.address)
    health = WorkerHealth(_ledger_ok, client)
    server = serve_worker_endpoints("127.0.0.1:0", TurngateMetrics(), health)
    try:
        starting = await _get(server.address, "/healthz")
        assert (starting.status_code, starting.json()["reason_code"]) == (503, "health.starting")
        await health.check_once()
        ok = await _get(server.address, "/healthz")
        assert (ok.status_code, ok.json()) == (200, {"ok": True})
        assert "turngate_build_info" in (await _get(server.address, "/metrics")).text

        health._check_ledger = _ledger_down
        await health.check_once()
        down = await _get(server.address, "/healthz")
        assert (down.status_code, down.json()["reason_code"]) == (503, "ledger.unavailable")

        silent = await Client.connect(silent_server, lazy=True)
        health = WorkerHealth(_ledger_ok, silent)
        server.close()
        server = serve_worker_endpoints("127.0.0.1:0", TurngateMetrics(), health)
        state = await asyncio.wait_for(health.check_once(), 60)
        assert state.reason_code == "temporal.unavailable"
        assert (await _get(server.address, "/healthz")).status_code == 503
    finally:
        server.close()


async def test_a_stopped_check_loop_turns_stale(temporal_server: DevServer) -> None:
    client = await Client.connect(temporal_server.address)
    health = WorkerHealth(_ledger_ok, client, stale_after_s=0.2)
    assert (await health.check_once()).ok
    await asyncio.sleep(0.3)
    assert health.current().reason_code == "health.stale"
