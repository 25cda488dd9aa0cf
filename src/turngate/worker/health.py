"""Worker readiness: ``GET /healthz`` beside ``/metrics`` on ``TURNGATE_WORKER_METRICS_BIND``.

A worker has no API, so an orchestrator cannot tell a worker that polls from one whose ledger or
Temporal connection is gone. :class:`WorkerHealth` checks both every few seconds in the worker's
event loop; the HTTP thread only reads the last result: 200 ``{"ok": true}`` when both answered
within the last check and it is recent, else 503 with ``reason_code`` ``ledger.unavailable``,
``temporal.unavailable`` or ``health.stale`` (the check loop itself stopped).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from temporalio.client import Client

from turngate.telemetry.metrics import MetricsServer, TurngateMetrics, parse_bind

log = logging.getLogger(__name__)
CHECK_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class HealthState:
    ok: bool
    reason_code: str | None
    detail: str
    checked_at: float


class WorkerHealth:
    def __init__(
        self,
        check_ledger: Callable[[], Any],
        client: Client,
        *,
        every_s: float = 5.0,
        stale_after_s: float = 30.0,
    ) -> None:
        self._check_ledger = check_ledger
        self._client = client
        self.every_s = every_s
        self.stale_after_s = stale_after_s
        self._state = HealthState(False, "health.starting", "no check has run yet", time.monotonic())

    async def check_once(self) -> HealthState:
        try:
            await asyncio.wait_for(asyncio.to_thread(self._check_ledger), CHECK_TIMEOUT_S)
        except Exception as exc:
            state = HealthState(False, "ledger.unavailable", _why(exc), time.monotonic())
        else:
            try:
                await asyncio.wait_for(self._client.service_client.check_health(), CHECK_TIMEOUT_S)
            except Exception as exc:
                state = HealthState(False, "temporal.unavailable", _why(exc), time.monotonic())
            else:
                state = HealthState(True, None, "ledger and temporal answer", time.monotonic())
        if state.ok != self._state.ok:
            log.log(logging.INFO if state.ok else logging.WARNING, "worker health: %s", state.detail)
        self._state = state
        return state

    async def run(self) -> None:
        while True:
            await self.check_once()
            await asyncio.sleep(self.every_s)

    def current(self) -> HealthState:
        state = self._state
        if time.monotonic() - state.checked_at > self.stale_after_s:
            return HealthState(
                False, "health.stale", "the health check has not run recently", state.checked_at
            )
        return state


def _why(exc: BaseException) -> str:
    """A failed check's detail; a check cut off by its timeout says so (its message is empty)."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return f"no answer within {CHECK_TIMEOUT_S:g} s (a partition, or a server that hangs)"
    return f"{type(exc).__name__}: {exc}"


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _app(metrics_app: Callable[..., Iterable[bytes]], health: WorkerHealth) -> Callable[..., Iterable[bytes]]:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/healthz":
            return metrics_app(environ, start_response)
        state = health.current()
        body = (
            {"ok": state.ok}
            if state.ok
            else {"ok": False, "reason_code": state.reason_code, "detail": state.detail}
        )
        status = "200 OK" if state.ok else "503 Service Unavailable"
        start_response(status, [("Content-Type", "application/json")])
        return [json.dumps(body).encode()]

    return app


def serve_worker_endpoints(bind: str, metrics: TurngateMetrics, health: WorkerHealth) -> MetricsServer:
    """``/metrics`` and ``/healthz`` on ``bind`` (``host:port``; port 0: a free one), a daemon thread."""
    import threading

    host, port = parse_bind(bind)
    server = make_server(
        host,
        port,
        _app(make_wsgi_app(metrics.registry), health),
        ThreadingWSGIServer,
        handler_class=_QuietHandler,
    )
    thread = threading.Thread(target=server.serve_forever, name="worker-endpoints", daemon=True)
    thread.start()
    address = server.server_address
    log.info("worker metrics and health on http://%s:%d/ (/metrics, /healthz)", address[0], address[1])
    return MetricsServer(server, thread, (str(address[0]), int(address[1])))
