"""A server span per HTTP request, continued into the Temporal client call.

Recent FastAPI versions trace requests natively through the global tracer provider (which
:func:`~turngate.telemetry.tracing.configure_tracing` sets): then :class:`TracingMiddleware`
sees that request's SERVER span already current and adds nothing, and
:func:`fastapi_telemetry_options` keeps scrapes and probes out of traces and exception messages
out of OTel logs. Without native tracing (older FastAPI, or ``telemetry={"tracing": False}``)
the middleware creates the span itself. Either way the span is named
``{method} {route template}`` (``POST /ingress/intent``, ``GET /turns/{correlation_id}/stream``),
continues a W3C ``traceparent`` sent by the caller, and is the current span while the endpoint
runs: the Temporal client's StartWorkflow span (and so the workflow and its activities) becomes
its child. Attributes follow the OTel HTTP server conventions; bodies and headers (other than
the user agent) are never recorded (FastAPI's native span also records ``url.query``: turngate's
query parameters are ids and flags, never message text).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from fastapi import FastAPI
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import SpanKind, Status, StatusCode

from turngate.telemetry.tracing import tracer, tracing_enabled

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Paths never traced: scrapes and probes would drown the turns.
UNTRACED_PATHS: tuple[str, ...] = ("/metrics", "/healthz")


class _HeaderGetter(Getter[Scope]):
    def get(self, carrier: Scope, key: str) -> list[str] | None:
        wanted = key.lower().encode("latin-1")
        values = [v.decode("latin-1") for k, v in carrier.get("headers") or () if k.lower() == wanted]
        return values or None

    def keys(self, carrier: Scope) -> list[str]:
        return [k.decode("latin-1") for k, _ in carrier.get("headers") or ()]


_GETTER = _HeaderGetter()


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


def _route_template(scope: Scope) -> str | None:
    route = scope.get("route")
    path = getattr(route, "path", None)
    if not isinstance(path, str):
        return None
    return (scope.get("root_path") or "") + path


def _outer_server_span() -> bool:
    """A SERVER span is already current: an outer instrumentation (FastAPI's native telemetry,
    opentelemetry-instrumentation-asgi) traces this request."""
    span = trace.get_current_span()
    return span.is_recording() and getattr(span, "kind", None) == SpanKind.SERVER


class TracingMiddleware:
    """Wrap an ASGI app; a pass-through while tracing is off or when the request is already
    traced (both checked per request)."""

    def __init__(self, app: ASGIApp, *, untraced_paths: Iterable[str] = UNTRACED_PATHS) -> None:
        self.app = app
        self.untraced = frozenset(untraced_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or not tracing_enabled()
            or scope.get("path") in self.untraced
            or _outer_server_span()
        ):
            await self.app(scope, receive, send)
            return
        method = str(scope.get("method", "GET")).upper()
        attributes: dict[str, Any] = {
            "http.request.method": method,
            "url.path": scope.get("path", ""),
            "url.scheme": scope.get("scheme", "http"),
            "network.protocol.version": scope.get("http_version", "1.1"),
        }
        server = scope.get("server")
        if server and server[0]:
            attributes["server.address"] = server[0]
            if server[1] is not None:
                attributes["server.port"] = server[1]
        client = scope.get("client")
        if client and client[0]:
            attributes["client.address"] = client[0]
        agent = _header(scope, b"user-agent")
        if agent:
            attributes["user_agent.original"] = agent
        parent = propagate.extract(scope, getter=_GETTER)
        status: dict[str, int] = {}

        async def send_and_note(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        with tracer().start_as_current_span(
            method,
            context=parent,
            kind=SpanKind.SERVER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                await self.app(scope, receive, send_and_note)
            except Exception as exc:
                span.set_attribute("error.type", type(exc).__qualname__)
                span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
                raise
            finally:
                route = _route_template(scope)
                if route is not None:
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
                code = status.get("code")
                if code is not None:
                    span.set_attribute("http.response.status_code", code)
                    if code >= 500:
                        span.set_attribute("error.type", str(code))
                        span.set_status(Status(StatusCode.ERROR))


def fastapi_telemetry_options(untraced_paths: Iterable[str] = UNTRACED_PATHS) -> dict[str, Any]:
    """Keyword arguments for ``FastAPI(...)``: with native telemetry (``FastAPI(telemetry=...)``
    exists), skip ``untraced_paths`` and keep OTel logs off (they would carry exception messages
    and validation inputs, i.e. possibly message text); ``{}`` on FastAPI versions without it."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    skipped = frozenset(untraced_paths)

    def untraced(scope: MutableMapping[str, Any]) -> bool:
        return scope.get("path") in skipped

    return {"telemetry": {"exclude": untraced, "logs": False}}


def instrument_app(app: FastAPI, *, untraced_paths: Iterable[str] = UNTRACED_PATHS) -> FastAPI:
    """Add :class:`TracingMiddleware` (outermost). Call once, before the app starts serving;
    while tracing is off the middleware only checks a flag per request."""
    app.add_middleware(TracingMiddleware, untraced_paths=tuple(untraced_paths))
    return app


def current_trace_id() -> str | None:
    """The current trace id as 32 hex digits (for logs and error bodies), or None."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None
