"""Prometheus request metrics for the API: ``turngate_http_requests_total{method, route,
status}`` and ``turngate_http_request_duration_seconds{method, route}``.

``route`` is the route template (``/turns/{correlation_id}/stream``), never the raw path, so ids
cannot blow up the label set; a path no route matched counts as ``unmatched``.
"""

from __future__ import annotations

import time
from collections.abc import MutableMapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from turngate.telemetry.metrics import TurngateMetrics

UNMATCHED = "unmatched"


def _route(scope: MutableMapping[str, Any]) -> str:
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) else UNMATCHED


class HttpMetricsMiddleware:
    def __init__(self, app: ASGIApp, *, metrics: TurngateMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = {"code": 500}  # an exception before the response started is a 500

        async def noting(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noting)
        finally:
            method = str(scope.get("method", "GET")).upper()
            self.metrics.observe_http(method, _route(scope), status["code"], time.monotonic() - started)
