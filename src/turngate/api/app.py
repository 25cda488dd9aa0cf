"""The FastAPI app: ingress and observation over the ledger, turns started on Temporal."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from swagger_ui_bundle import swagger_ui_path
from temporalio.client import Client

from turngate import __version__
from turngate.api import ingress, observe, stream
from turngate.api.admission import TurnSlots
from turngate.api.codec import mount_codec
from turngate.api.disk_guard import LedgerDiskGuard, sqlite_ledger_dir
from turngate.api.error_responses import error_response
from turngate.api.ledger_outage import LedgerOutage
from turngate.api.messages_api import routes as messages_routes
from turngate.api.openai_compat import routes as openai_routes
from turngate.api.openapi import ERRORS, install_openapi
from turngate.api.responses_api import routes as responses_routes
from turngate.api.state import ApiState
from turngate.api.ui import mount_ui
from turngate.api.watcher import LedgerWatcher
from turngate.artifacts import open_artifact_store
from turngate.jobs import routes as job_routes
from turngate.ledger import LedgerStore, LedgerUnavailableError
from turngate.policy_lifecycle import routes as policy_routes
from turngate.reviews import routes as review_routes
from turngate.reviews.pending import review_gauge_sources
from turngate.security.auth import Authenticator, AuthError, authorize
from turngate.security.keys import KeyStore
from turngate.security.limits import open_limits
from turngate.settings import Settings
from turngate.streaming import open_token_bus
from turngate.telemetry import (
    API_SERVICE,
    configure_tracing,
    default_metrics,
    fastapi_telemetry_options,
    flush_tracing,
    instrument_app,
    metrics_router,
    turn_queue_source,
)
from turngate.telemetry.http_metrics import HttpMetricsMiddleware
from turngate.temporal_client import connect, ensure_search_attributes
from turngate.worker.boundary import load_boundary

log = logging.getLogger(__name__)


def create_app(settings: Settings, *, client: Client | None = None) -> FastAPI:
    metrics = default_metrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        configure_tracing(API_SERVICE)  # before connecting: the client carries the interceptor
        boundary = load_boundary(settings)
        temporal = client or await connect(settings)
        app.state.search_attributes = await ensure_search_attributes(temporal)
        store = LedgerStore(settings.effective_ledger_url, timeout_s=settings.ledger_timeout_s)
        outage = LedgerOutage(store.head)
        app.state.ledger_outage = outage
        ledger_dir = sqlite_ledger_dir(settings.effective_ledger_url)
        app.state.ledger_disk = LedgerDiskGuard(ledger_dir, settings.ledger_min_free_bytes)
        watcher = LedgerWatcher(store, outage=outage)
        watcher.start()
        app.state.token_bus = open_token_bus(settings.effective_token_bus_url)
        app.state.turn_slots = TurnSlots(settings.turn_queue_max)
        limits = open_limits(settings)
        app.state.limits = limits
        app.state.auth = Authenticator(
            KeyStore(store.engine),
            settings.auth_mode,
            limits.rate,
            key_cache_s=settings.auth_key_cache_s,
            keyless_read=settings.keyless_read,
            keyless_read_tenant=settings.keyless_read_tenant,
        )
        if settings.keyless_read:
            log.warning(
                "KEYLESS READ-ONLY MODE IS ON (TURNGATE_KEYLESS_READ): anyone who reaches this API "
                "reads /snapshot, /tail, /status and /capabilities without a key, as %s",
                f"tenant {settings.keyless_read_tenant!r}"
                if settings.keyless_read_tenant
                else "every tenant (the whole ledger)",
            )
        app.state.stream_slots = limits.streams
        artifacts = open_artifact_store(settings.effective_artifacts)
        app.state.turngate = ApiState(settings, temporal, store, watcher, boundary, artifacts)
        metrics.watch_queues(turn_queue_source(temporal, settings.turns_task_queue))
        metrics.watch_ledger(lambda: store.head()[0])
        metrics.watch_reviews(*review_gauge_sources(temporal, settings.workflow_id_prefix))
        log.info(
            "api up: ledger=%s temporal=%s",
            settings.public_view()["effective_ledger_url"],
            settings.temporal_address,
        )
        try:
            yield
        finally:
            metrics.unwatch()
            await app.state.turn_slots.aclose()
            await watcher.stop()
            await outage.aclose()
            await app.state.token_bus.aclose()
            # a shared backend: pending lease releases, then its client (may wait on Redis)
            await asyncio.to_thread(limits.close)
            store.close()
            flush_tracing()

    app = FastAPI(
        title="turngate",
        version=__version__,
        summary="A deterministic, durable, auditable boundary in front of LLM calls.",
        lifespan=lifespan,
        # Every API route (also ones included later) is authenticated and authorized by role:
        # turngate.security.routes says which role; unknown routes need admin.
        dependencies=[Depends(authorize)],
        # Every route may answer the project's error body; /docs is served from packaged assets.
        responses=ERRORS,
        docs_url=None,
        redoc_url=None,
        **fastapi_telemetry_options(),
    )
    install_openapi(app, swagger_ui_path)
    instrument_app(app)
    app.add_middleware(HttpMetricsMiddleware, metrics=metrics)
    app.include_router(ingress.router)
    app.include_router(observe.router)
    app.include_router(stream.router)
    app.include_router(job_routes.router)
    app.include_router(policy_routes.router)
    app.include_router(review_routes.router)
    app.include_router(openai_routes.router)
    app.include_router(responses_routes.router)
    app.include_router(messages_routes.router)
    app.include_router(metrics_router(metrics))
    mount_codec(app, settings)
    mount_ui(app)

    @app.exception_handler(AuthError)
    async def refused(_: Request, exc: AuthError) -> JSONResponse:
        response = error_response(exc.status, exc.reason_code, exc.detail)
        response.headers.update(exc.headers)
        return response

    @app.exception_handler(LedgerUnavailableError)
    async def ledger_unavailable(request: Request, exc: LedgerUnavailableError) -> JSONResponse:
        outage: LedgerOutage = request.app.state.ledger_outage
        outage.failed(exc)
        return outage.response()

    @app.exception_handler(RequestValidationError)
    async def invalid_query(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return JSONResponse(
            {
                "ok": False,
                "reason_code": "request.invalid_parameter",
                "detail": f"{where}: {first.get('msg')}",
            },
            status_code=422,
        )

    return app
