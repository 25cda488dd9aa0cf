"""The Temporal SDK's metrics: folded into turngate's registry, or on the SDK's own port."""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client

from turngate.devserver import free_port
from turngate.telemetry import TemporalSdkMetrics, TurngateMetrics, serve_worker_metrics, temporal_runtime


def test_off_by_default() -> None:
    assert temporal_runtime() is None  # TURNGATE_TEMPORAL_METRICS_BIND unset
    assert temporal_runtime("off") is None


async def test_folded_into_the_registry_served_by_the_worker_endpoint(temporal_server) -> None:
    metrics = TurngateMetrics()
    runtime = temporal_runtime("registry", metrics=metrics)
    assert runtime is not None and temporal_runtime("registry", metrics=metrics) is runtime
    client = await Client.connect(temporal_server.address, runtime=runtime)
    await client.count_workflows()
    server = serve_worker_metrics("127.0.0.1:0", metrics)
    assert server is not None
    try:
        resp = await asyncio.to_thread(httpx.get, "http://{}:{}/metrics".format(*server.address))
    finally:
        server.close()
    families = {f.name: f for f in text_string_to_metric_families(resp.text)}
    requests = [s for s in families["temporal_request"].samples if s.name == "temporal_request_total"]
    assert any(s.labels.get("operation") == "CountWorkflowExecutions" and s.value >= 1 for s in requests)
    latency = families["temporal_request_latency_seconds"]
    assert latency.type == "histogram"
    assert "turngate_turns" in families  # one endpoint for both


async def test_own_prometheus_endpoint(temporal_server, monkeypatch) -> None:
    bind = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("TURNGATE_TEMPORAL_METRICS_BIND", bind)
    runtime = temporal_runtime()
    assert runtime is not None
    client = await Client.connect(temporal_server.address, runtime=runtime)
    await client.count_workflows()
    resp = await asyncio.to_thread(httpx.get, f"http://{bind}/metrics")
    names = {f.name for f in text_string_to_metric_families(resp.text)}
    assert "temporal_request" in names


class _Metric:
    def __init__(self, name: str, kind: int, unit: str | None = None) -> None:
        self.name, self.kind, self.unit, self.description = name, kind, unit, f"{name} help"


class _Update:
    def __init__(self, metric: _Metric, value: float, **attributes: str) -> None:
        self.metric, self.value, self.attributes = metric, value, attributes


class _Buffer:
    def __init__(self) -> None:
        self.pending: list[_Update] = []

    def retrieve_updates(self) -> list[_Update]:
        drained, self.pending = self.pending, []
        return drained


def test_buffer_updates_become_prometheus_families() -> None:
    polls, slots, latency = (
        _Metric("temporal_poll", 0),
        _Metric("temporal_slots", 1),
        _Metric("temporal_latency", 2, "s"),
    )
    buffer = _Buffer()
    collector = TemporalSdkMetrics(buffer)  # type: ignore[arg-type]
    registry = CollectorRegistry()
    registry.register(collector)
    buffer.pending = [
        _Update(polls, 1, task_queue="a"),
        _Update(polls, 2, task_queue="a"),
        _Update(polls, 1, task_queue="b", extra="x"),
        _Update(slots, 5, worker="w"),
        _Update(slots, 3, worker="w"),
        _Update(latency, 0.02),
        _Update(latency, 7.0),
    ]
    collector.drain()  # the background drain; the scrape drains again
    buffer.pending = [_Update(polls, 1, task_queue="a")]
    text = generate_latest(registry).decode()
    value = registry.get_sample_value
    assert value("temporal_poll_total", {"task_queue": "a", "extra": ""}) == 4
    assert value("temporal_poll_total", {"task_queue": "b", "extra": "x"}) == 1
    assert value("temporal_slots", {"worker": "w"}) == 3
    assert value("temporal_latency_seconds_bucket", {"le": "0.025"}) == 1
    assert value("temporal_latency_seconds_bucket", {"le": "5.0"}) == 1
    assert value("temporal_latency_seconds_bucket", {"le": "10.0"}) == 2
    assert value("temporal_latency_seconds_bucket", {"le": "+Inf"}) == 2
    assert value("temporal_latency_seconds_sum", {}) == 7.02
    assert "# TYPE temporal_latency_seconds histogram" in text
