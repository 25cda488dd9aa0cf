"""Prometheus metrics on turngate's own CollectorRegistry (never the global default one).

Each process records what happens in it and is scraped on its own: the API serves its registry
at ``GET /metrics`` (:func:`metrics_router`), the worker at ``TURNGATE_WORKER_METRICS_BIND``
(:func:`serve_worker_metrics`). Turns by decision, provider latency and tokens are recorded in
the worker; queue sizes and ledger length are gauges that the API fills from callbacks
(:meth:`TurngateMetrics.watch`), refreshed at most every ``every_s`` seconds when scraped.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import platform
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    generate_latest,
    start_http_server,
)

from turngate import __version__
from turngate.core.shadow import shadow_agreements
from turngate.spend.metrics import SpendCounters

log = logging.getLogger(__name__)

WORKER_METRICS_ENV = "TURNGATE_WORKER_METRICS_BIND"
#: Provider calls take from a fraction of a second to minutes.
LATENCY_BUCKETS: tuple[float, ...] = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)

#: A gauge callback: label value -> value (``{"turns": 3, "llm": 1}``), sync or async.
GaugeSource = Callable[[], Mapping[str, float] | Awaitable[Mapping[str, float]]]
#: A single-value gauge callback (``lambda: store.head()[0]``), sync or async.
ValueSource = Callable[[], float | Awaitable[float]]


#: A scrape never waits longer than this for a gauge callback.
SOURCE_TIMEOUT_S = 5.0


@dataclass
class _Watched:
    name: str
    gauge: Gauge
    source: Callable[[], Any]
    every_s: float
    labelled: bool
    checked_at: float = float("-inf")
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class TurngateMetrics:
    """turngate's metrics, on ``registry`` (a fresh CollectorRegistry unless given)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.turns = Counter("turngate_turns", "Turns decided, by decision.", ["decision"], registry=r)
        self.provider_latency = Histogram(
            "turngate_provider_latency_seconds",
            "Provider call duration per attempt (outcome: ok, error, cancelled).",
            ["provider", "model", "outcome"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.provider_tokens = Counter(
            "turngate_provider_tokens",
            "Tokens reported by providers (direction: input, output).",
            ["provider", "direction"],
            registry=r,
        )
        self.shadow_decisions = Counter(
            "turngate_shadow_decisions",
            "Shadow policy decisions, by policy and whether they agree with the recorded "
            "ALLOW/DENY (agreement: agree, disagree).",
            ["policy_id", "policy_version", "agreement"],
            registry=r,
        )
        self.verify_failures = Counter(
            "turngate_verify_failures", "Ledger verification failures, by finding kind.", ["kind"], registry=r
        )
        self.queue_size = Gauge(
            "turngate_queue_size",
            "Turns waiting or running, per queue (turns: running TurnWorkflows; llm: allowed, "
            "in or waiting for the provider call).",
            ["queue"],
            registry=r,
        )
        self.ledger_events = Gauge("turngate_ledger_events", "Events in the ledger (its length).", registry=r)
        self.reviews_pending = Gauge(
            "turngate_reviews_pending",
            "Turns waiting for a reviewer's verdict (docs/REVIEWS.md).",
            registry=r,
        )
        self.review_oldest_age = Gauge(
            "turngate_review_oldest_age_seconds",
            "How long the oldest turn waiting for a reviewer has waited (0: none waits).",
            registry=r,
        )
        self.spend = SpendCounters(r)  # docs/BUDGETS.md
        self.decision_reasons = Counter(
            "turngate_decision_reasons",
            "Reason codes of DECISIONs (a turn with several codes counts once under each).",
            ["decision", "reason_code"],
            registry=r,
        )
        self.payload_codec_failures = Counter(
            "turngate_payload_codec_failures",
            "Temporal payloads the claim check could not store or read back, by operation and code.",
            ["operation", "code"],
            registry=r,
        )
        self.http_requests = Counter(
            "turngate_http_requests",
            "API requests by method, route template and status code.",
            ["method", "route", "status"],
            registry=r,
        )
        self.http_duration = Histogram(
            "turngate_http_request_duration_seconds",
            "API request duration until the response ends (streams: their whole life).",
            ["method", "route"],
            registry=r,
        )
        Info("turngate_build", "The running turngate.", registry=r).info(
            {"version": __version__, "python": platform.python_version()}
        )
        self._watched: dict[str, _Watched] = {}
        self._ledger_seen = 0
        self._ledger_lock = threading.Lock()

    # ------------------------------------------------------------------ recording (worker)

    def record_decision(self, decision: str) -> None:
        self.turns.labels(decision=decision).inc()

    def record_shadows(self, payload: Mapping[str, Any]) -> None:
        """Count each shadow entry of a DECISION payload as agreeing with its ALLOW/DENY or not."""
        for entry, agrees in shadow_agreements(payload):
            self.shadow_decisions.labels(
                policy_id=str(entry.get("policy_id")),
                policy_version=str(entry.get("policy_version")),
                agreement="agree" if agrees else "disagree",
            ).inc()

    def observe_provider_call(
        self,
        provider: str,
        model: str,
        *,
        outcome: str,
        seconds: float,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> None:
        self.provider_latency.labels(provider=provider, model=model, outcome=outcome).observe(seconds)
        if input_tokens:
            self.provider_tokens.labels(provider=provider, direction="input").inc(input_tokens)
        if output_tokens:
            self.provider_tokens.labels(provider=provider, direction="output").inc(output_tokens)

    def observe_event(self, event: Any) -> None:
        """A ledger event was recorded (``turngate.core.events.Event``): a DECISION counts a
        turn by its decision; the ledger length gauge follows the highest index seen."""
        payload = event.payload if isinstance(event.payload, Mapping) else {}
        if str(event.kind) == "DECISION" and payload.get("decision"):
            decision = str(payload["decision"])
            self.record_decision(decision)
            for code in payload.get("reason_codes") or ():
                self.decision_reasons.labels(decision=decision, reason_code=str(code)).inc()
            self.record_shadows(payload)
        self.spend.observe(event)
        with self._ledger_lock:
            if event.index + 1 > self._ledger_seen:
                self._ledger_seen = event.index + 1
                self.ledger_events.set(self._ledger_seen)

    def observe_http(self, method: str, route: str, status: int, seconds: float) -> None:
        self.http_requests.labels(method=method, route=route, status=str(status)).inc()
        self.http_duration.labels(method=method, route=route).observe(seconds)

    def record_verify(self, kinds: Iterable[Any]) -> None:
        """Count failures by kind: pass ``report.failures`` of an AuditReport (findings with a
        ``kind``) or plain kind strings."""
        for item in kinds:
            kind = getattr(item, "kind", item)
            self.verify_failures.labels(kind=str(getattr(kind, "value", kind))).inc()

    # ------------------------------------------------------------------ gauges from callbacks

    def watch_queues(self, source: GaugeSource, *, every_s: float = 10.0) -> None:
        """Fill ``turngate_queue_size{queue}`` from ``source`` (e.g. :func:`turn_queue_source`),
        replacing an earlier source (an app started again in the same process)."""
        self.queue_size.clear()
        self._watched["queue_size"] = _Watched(
            "turngate_queue_size", self.queue_size, source, every_s, labelled=True
        )

    def watch_ledger(self, source: ValueSource, *, every_s: float = 10.0) -> None:
        """Fill ``turngate_ledger_events`` from ``source`` (e.g. ``lambda: store.head()[0]``),
        replacing an earlier source."""
        self._watched["ledger_events"] = _Watched(
            "turngate_ledger_events", self.ledger_events, source, every_s, labelled=False
        )

    def watch_reviews(self, pending: ValueSource, oldest_age: ValueSource, *, every_s: float = 10.0) -> None:
        """Fill the review gauges from their sources (e.g. turngate.reviews.pending's)."""
        for name, gauge, source in (
            ("turngate_reviews_pending", self.reviews_pending, pending),
            ("turngate_review_oldest_age_seconds", self.review_oldest_age, oldest_age),
        ):
            self._watched[name] = _Watched(name, gauge, source, every_s, labelled=False)

    def unwatch(self) -> None:
        """Stop calling the gauge sources (the API's lifespan ends: its client and store close)."""
        self._watched.clear()
        self.queue_size.clear()

    async def refresh(self, *, force: bool = False) -> None:
        """Call the gauge callbacks whose value is older than their ``every_s`` (all with
        ``force``). Sync callbacks run in a thread. A failing (or, after
        :data:`SOURCE_TIMEOUT_S`, silent) callback is logged; its queue samples are dropped
        (absent, not stale), the ledger gauge keeps its last value."""
        await asyncio.gather(*(self._refresh_one(w, force) for w in list(self._watched.values())))

    async def _refresh_one(self, watched: _Watched, force: bool) -> None:
        async with watched.lock:
            now = time.monotonic()
            if not force and now - watched.checked_at < watched.every_s:
                return
            watched.checked_at = now
            try:
                value = await asyncio.wait_for(_call(watched.source), SOURCE_TIMEOUT_S)
            except Exception as exc:
                log.warning("metrics: the %s callback failed: %r", watched.name, exc)
                if watched.labelled:
                    watched.gauge.clear()
                return
            if watched.labelled:
                watched.gauge.clear()
                for label, number in dict(value).items():
                    watched.gauge.labels(str(label)).set(float(number))
            else:
                watched.gauge.set(float(value))


async def _call(source: Callable[[], Any]) -> Any:
    if inspect.iscoroutinefunction(source):
        return await source()
    value = await asyncio.to_thread(source)  # sync sources may block (a database query)
    return await value if inspect.isawaitable(value) else value


_default: TurngateMetrics | None = None
_default_lock = threading.Lock()


def default_metrics() -> TurngateMetrics:
    """The process's metrics (one registry per process: API and worker share it under
    ``turngate dev``). Tests that need isolation create their own :class:`TurngateMetrics`."""
    global _default
    with _default_lock:
        if _default is None:
            _default = TurngateMetrics()
        return _default


def metrics_router(metrics: TurngateMetrics | CollectorRegistry) -> APIRouter:
    """``GET /metrics`` in the Prometheus text format (gauge callbacks refreshed first)."""
    router = APIRouter()

    @router.get("/metrics", include_in_schema=False)
    async def prometheus_metrics() -> Response:
        if isinstance(metrics, TurngateMetrics):
            await metrics.refresh()
            registry = metrics.registry
        else:
            registry = metrics
        body = await asyncio.to_thread(generate_latest, registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return router


def parse_bind(bind: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9464`` for IPv6) -> (host, port)."""
    host, sep, port = bind.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected host:port, got {bind!r}")
    return (host.strip("[]") or "0.0.0.0"), int(port)


@dataclass
class MetricsServer:
    """A running ``/metrics`` HTTP server (a daemon thread); :meth:`close` stops it."""

    server: Any
    thread: threading.Thread
    address: tuple[str, int]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        with contextlib.suppress(RuntimeError):
            self.thread.join(timeout=5)


def serve_worker_metrics(
    bind: str | None = None, metrics: TurngateMetrics | None = None
) -> MetricsServer | None:
    """Serve ``metrics`` (default: :func:`default_metrics`) on ``bind`` (default: the
    ``TURNGATE_WORKER_METRICS_BIND`` env, e.g. ``127.0.0.1:9464``; unset: nothing is served,
    returns None). Port 0 picks a free port (see ``MetricsServer.address``)."""
    bind = bind if bind is not None else os.environ.get(WORKER_METRICS_ENV, "").strip()
    if not bind:
        return None
    host, port = parse_bind(bind)
    registry = (metrics or default_metrics()).registry
    server, thread = start_http_server(port, addr=host, registry=registry)
    address = server.server_address
    log.info("worker metrics on http://%s:%d/metrics", address[0], address[1])
    return MetricsServer(server, thread, (str(address[0]), int(address[1])))


def turn_queue_source(client: Any, task_queue: str, *, workflow_type: str = "TurnWorkflow") -> GaugeSource:
    """A queue-size callback over Temporal visibility (two COUNT queries per refresh):
    ``turns`` = running TurnWorkflows on ``task_queue``; ``llm`` = those already ALLOWed (in or
    waiting for their provider call; the ``TurngateDecision`` search attribute)."""
    base = f"WorkflowType='{workflow_type}' AND ExecutionStatus='Running' AND TaskQueue='{task_queue}'"

    async def sizes() -> dict[str, float]:
        running, allowed = await asyncio.gather(
            client.count_workflows(base), client.count_workflows(f"{base} AND TurngateDecision='ALLOW'")
        )
        return {"turns": float(running.count), "llm": float(allowed.count)}

    return sizes
