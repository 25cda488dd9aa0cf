"""turngate's registry: isolated, gauge callbacks rate-limited, /metrics valid Prometheus text."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import REGISTRY, CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from turngate.audit.verification import AuditKind, Finding
from turngate.telemetry import (
    TurngateMetrics,
    metrics_router,
    serve_worker_metrics,
    turn_queue_source,
)
from turngate.telemetry.metrics import parse_bind
from turngate.temporal_client import ensure_search_attributes
from turngate.workflows.shared import SA_DECISION


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


async def scrape(router_target) -> httpx.Response:
    app = FastAPI()
    app.include_router(metrics_router(router_target))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api.test") as http:
        return await http.get("/metrics")


def test_each_instance_has_its_own_registry_never_the_global_one() -> None:
    one, two = TurngateMetrics(), TurngateMetrics()
    one.record_decision("ALLOW")
    assert one.registry.get_sample_value("turngate_turns_total", {"decision": "ALLOW"}) == 1
    assert two.registry.get_sample_value("turngate_turns_total", {"decision": "ALLOW"}) is None
    assert REGISTRY.get_sample_value("turngate_turns_total", {"decision": "ALLOW"}) is None


def test_verify_failures_by_kind() -> None:
    metrics = TurngateMetrics()
    metrics.record_verify(
        [
            Finding(kind=AuditKind.CHAIN_BREAK, detail="x"),
            Finding(kind=AuditKind.CHAIN_BREAK, detail="y"),
            "artifact_missing",
        ]
    )
    value = metrics.registry.get_sample_value
    assert value("turngate_verify_failures_total", {"kind": "chain_break"}) == 2
    assert value("turngate_verify_failures_total", {"kind": "artifact_missing"}) == 1


async def test_metrics_endpoint_serves_prometheus_text_with_queue_gauges() -> None:
    metrics = TurngateMetrics()
    calls: list[int] = []

    async def queues() -> dict[str, float]:
        calls.append(1)
        return {"turns": 4, "llm": 2}

    metrics.watch_queues(queues, every_s=60)
    metrics.watch_ledger(lambda: 17, every_s=60)  # sync callbacks run in a thread
    metrics.record_decision("ALLOW")
    metrics.observe_provider_call(
        "echo", "echo-1", outcome="ok", seconds=0.3, input_tokens=2, output_tokens=3
    )
    first = await scrape(metrics)
    second = await scrape(metrics)
    assert first.status_code == 200
    assert first.headers["content-type"] == "text/plain; version=1.0.0; charset=utf-8"
    assert len(calls) == 1  # refreshed at most every 60 s
    parsed = families(second.text)
    queue = {s.labels["queue"]: s.value for s in parsed["turngate_queue_size"].samples}
    assert queue == {"turns": 4.0, "llm": 2.0}
    assert parsed["turngate_ledger_events"].samples[0].value == 17
    assert parsed["turngate_turns"].type == "counter"
    latency = parsed["turngate_provider_latency_seconds"]
    assert latency.type == "histogram"
    count = [s for s in latency.samples if s.name.endswith("_count")]
    assert count[0].labels == {"provider": "echo", "model": "echo-1", "outcome": "ok"} and count[0].value == 1


async def test_a_failing_callback_drops_its_samples() -> None:
    metrics = TurngateMetrics()
    answers: list[object] = [{"turns": 1}, RuntimeError("visibility down"), {"turns": 2}]

    def queues() -> dict[str, float]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]

    metrics.watch_queues(queues, every_s=0)
    value = metrics.registry.get_sample_value
    await metrics.refresh()
    assert value("turngate_queue_size", {"queue": "turns"}) == 1
    await metrics.refresh()
    assert value("turngate_queue_size", {"queue": "turns"}) is None
    await metrics.refresh()
    assert value("turngate_queue_size", {"queue": "turns"}) == 2


async def test_router_over_a_plain_registry() -> None:
    registry = CollectorRegistry()
    Counter("plain_things", "things", registry=registry).inc()
    resp = await scrape(registry)
    assert families(resp.text)["plain_things"].samples[0].value == 1


def test_worker_metrics_server_on_its_own_port() -> None:
    assert serve_worker_metrics() is None  # TURNGATE_WORKER_METRICS_BIND unset: nothing served
    metrics = TurngateMetrics()
    metrics.record_decision("DENY")
    server = serve_worker_metrics("127.0.0.1:0", metrics)
    assert server is not None
    try:
        host, port = server.address
        resp = httpx.get(f"http://{host}:{port}/metrics")
        assert resp.status_code == 200
        samples = families(resp.text)["turngate_turns"].samples
        assert [(s.labels, s.value) for s in samples if s.name == "turngate_turns_total"] == [
            ({"decision": "DENY"}, 1.0)
        ]
    finally:
        server.close()


def test_worker_metrics_bind_from_env(monkeypatch) -> None:
    monkeypatch.setenv("TURNGATE_WORKER_METRICS_BIND", "127.0.0.1:0")
    server = serve_worker_metrics(metrics=TurngateMetrics())
    assert server is not None
    server.close()


@pytest.mark.parametrize(
    ("bind", "expected"),
    [("127.0.0.1:9464", ("127.0.0.1", 9464)), ("[::1]:9000", ("::1", 9000)), (":9464", ("0.0.0.0", 9464))],
)
def test_parse_bind(bind, expected) -> None:
    assert parse_bind(bind) == expected


@pytest.mark.parametrize("bind", ["9464", "host:", "host:port"])
def test_parse_bind_rejects(bind) -> None:
    with pytest.raises(ValueError):
        parse_bind(bind)


async def test_turn_queue_source_counts_from_temporal_visibility(temporal_client, settings) -> None:
    """Two turns nobody works on: both running, one already ALLOWed (waiting for the llm queue)."""
    await ensure_search_attributes(temporal_client, settings.temporal_namespace)
    source = turn_queue_source(temporal_client, settings.turns_task_queue)
    assert await source() == {"turns": 0.0, "llm": 0.0}
    handles = [
        await temporal_client.start_workflow(
            "TurnWorkflow",
            id=f"{settings.workflow_id_prefix}/queue-{n}",
            task_queue=settings.turns_task_queue,
            execution_timeout=timedelta(seconds=30),
            search_attributes=TypedSearchAttributes([SearchAttributePair(SA_DECISION, "ALLOW")] if n else []),
        )
        for n in range(2)
    ]
    try:
        sizes: dict[str, float] = {}
        for _ in range(100):  # visibility is eventually consistent
            sizes = dict(await source())
            if sizes == {"turns": 2.0, "llm": 1.0}:
                break
            await asyncio.sleep(0.05)
        assert sizes == {"turns": 2.0, "llm": 1.0}
    finally:
        for handle in handles:
            await handle.terminate("test done")


async def test_a_new_source_replaces_the_old_one_and_unwatch_stops_them() -> None:
    metrics = TurngateMetrics()
    value = metrics.registry.get_sample_value
    metrics.watch_queues(lambda: {"turns": 1, "old": 9}, every_s=0)
    await metrics.refresh()
    metrics.watch_queues(lambda: {"turns": 2}, every_s=0)  # e.g. the app started again
    await metrics.refresh()
    assert value("turngate_queue_size", {"queue": "turns"}) == 2
    assert value("turngate_queue_size", {"queue": "old"}) is None
    metrics.unwatch()
    await metrics.refresh()
    assert value("turngate_queue_size", {"queue": "turns"}) is None
