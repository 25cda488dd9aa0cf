"""One SERVER span per request (ours, or FastAPI's native one), never two; traceparent honoured."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from turngate.telemetry import fastapi_telemetry_options, instrument_app, tracer

PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{PARENT_TRACE}-00f067aa0ba902b7-01"


def build(**options) -> FastAPI:
    app = FastAPI(**options)

    @app.get("/items/{item_id}")
    async def item(item_id: str) -> dict:
        traced = trace.get_current_span().is_recording()
        with tracer().start_as_current_span("inside"):
            return {"id": item_id, "traced": traced}

    @app.get("/boom")
    async def boom() -> dict:
        raise RuntimeError("secret detail")

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"ok": True}

    @app.get("/metrics")
    async def metrics() -> dict:
        return {}

    return instrument_app(app)


async def call(app: FastAPI, path: str, **kwargs) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
        return await http.get(path, **kwargs)


def server_spans(spans) -> list:
    return [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]


@pytest.mark.parametrize("native", [False, True], ids=["middleware", "fastapi-native"])
async def test_one_server_span_named_by_route_and_continuing_traceparent(spans, native) -> None:
    app = build() if native else build(telemetry={"tracing": False})
    resp = await call(app, "/items/42", headers={"traceparent": TRACEPARENT, "user-agent": "probe/1"})
    assert resp.json() == {"id": "42", "traced": True}
    (server,) = server_spans(spans)
    assert server.name == "GET /items/{item_id}"
    assert format(server.context.trace_id, "032x") == PARENT_TRACE
    assert server.parent is not None and server.parent.is_remote
    attrs = server.attributes
    assert attrs["http.route"] == "/items/{item_id}"
    assert attrs["http.request.method"] == "GET"
    assert attrs["http.response.status_code"] == 200
    assert attrs["url.path"] == "/items/42"
    (inside,) = [s for s in spans.get_finished_spans() if s.name == "inside"]
    assert inside.context.trace_id == server.context.trace_id


async def test_middleware_span_attributes_and_errors(spans) -> None:
    app = build(telemetry={"tracing": False})
    resp = await call(app, "/boom")
    assert resp.status_code == 500
    (server,) = server_spans(spans)
    assert server.name == "GET /boom"
    assert server.status.status_code == StatusCode.ERROR
    assert server.attributes["error.type"] == "RuntimeError"
    assert "secret detail" not in str(server.attributes) + str(server.status.description)
    assert server.attributes["server.address"] == "api.test"


async def test_unmatched_path_keeps_the_bare_method(spans) -> None:
    resp = await call(build(telemetry={"tracing": False}), "/nope/123")
    assert resp.status_code == 404
    (server,) = server_spans(spans)
    assert server.name == "GET" and "http.route" not in server.attributes
    assert server.attributes["http.response.status_code"] == 404


@pytest.mark.parametrize("native", [False, True], ids=["middleware", "fastapi-native"])
async def test_scrapes_and_probes_are_not_traced(spans, native) -> None:
    options = fastapi_telemetry_options() if native else {"telemetry": {"tracing": False}}
    app = build(**options)
    for path in ("/metrics", "/healthz"):
        assert (await call(app, path)).status_code == 200
    assert server_spans(spans) == []
    await call(app, "/items/1")
    assert len(server_spans(spans)) == 1


@pytest.mark.parametrize("native", [False, True], ids=["middleware", "fastapi-native"])
async def test_no_spans_while_tracing_is_off(native) -> None:
    app = build() if native else build(telemetry={"tracing": False})
    resp = await call(app, "/items/1", headers={"traceparent": TRACEPARENT})
    assert resp.json() == {"id": "1", "traced": False}
