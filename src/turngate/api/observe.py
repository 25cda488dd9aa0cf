"""Read-only observation surfaces: /snapshot, /tail (SSE), /status, /capabilities, /healthz."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse
from sse_starlette.sse import EventSourceResponse

from turngate import __version__
from turngate.api.capabilities_gateway import gateway_v1_capabilities
from turngate.api.disk_guard import LedgerDiskGuard
from turngate.api.error_responses import error_response
from turngate.api.ledger_outage import RETRY_AFTER_S, LedgerOutage
from turngate.api.openapi import Capabilities, Health, SnapshotPage, Status, VerifyReport, sse
from turngate.api.state import ApiState, api_state
from turngate.core.events import INTERFACE_VERSION, KNOWN_INTENT_TYPES, MAX_ID_CHARS, Event
from turngate.core.json_depth import MAX_JSON_DEPTH
from turngate.jobs.control import job_runtime
from turngate.jobs.domain.models import JOB_TYPES
from turngate.jobs.domain.queues import job_concurrency, job_queues
from turngate.ledger import LedgerUnavailableError
from turngate.ledger.rows import event_matches
from turngate.schemas import CAPABILITIES_SCHEMA_VERSION, STATUS_SCHEMA_VERSION
from turngate.security.auth import request_principal
from turngate.security.principal import ROLE_ADMIN, ROLES, Principal
from turngate.security.routes import KEYLESS_READ_ROUTES, PUBLIC, ROUTE_ROLES
from turngate.security.streams import stream_slots, too_many_streams
from turngate.spend.status import budget_status
from turngate.telemetry import default_metrics
from turngate.worker.llm_capacity import llm_capacity

log = logging.getLogger(__name__)
router = APIRouter()

#: Events per /snapshot page (the DBL gateway's page size; its observer asks for exactly this).
#: A larger ``limit`` is clamped to it, never refused.
SNAPSHOT_MAX_LIMIT = 2000
#: Upper bound of index-like query parameters (a 64-bit database integer; larger is a 422).
MAX_INDEX = 2**62
#: A thread id no event has (ids are client strings; this prefix plus a uuid is never sent).
NO_SUCH_THREAD = "turngate:no-such-thread:"
TAIL_BATCH = 500
TAIL_PING_S = 15


@router.get("/snapshot", response_model=None, responses={200: {"model": SnapshotPage}})
def snapshot(
    request: Request,
    state: Annotated[ApiState, Depends(api_state)],
    limit: Annotated[int, Query(ge=1, le=MAX_INDEX)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_INDEX)] = 0,
    stream_id: str | None = None,
    lane: str | None = None,
    thread_id: str | None = None,
) -> dict[str, Any]:
    """A page of the ledger (the caller's tenant only). `offset` is a position within the
    filtered result; `length` counts it."""
    tenant = request_principal(request).tenant_id
    limit = min(limit, SNAPSHOT_MAX_LIMIT)
    length, events = state.store.snapshot(
        offset=offset, limit=limit, stream_id=stream_id, lane=lane, thread_id=thread_id, tenant_id=tenant
    )
    _, head = state.store.head()
    return {
        "length": length,
        "offset": offset,
        "limit": limit,
        "v_digest": head,
        "events": [e.to_wire() for e in events],
    }


def _sse(event: Event) -> dict[str, str]:
    return {"id": str(event.index), "event": "envelope", "data": json.dumps(event.to_wire())}


@router.get(
    "/tail",
    response_model=None,
    response_class=EventSourceResponse,
    responses=sse("ledger events: `event: envelope`, `id: <index>`"),
)
async def tail(
    request: Request,
    state: Annotated[ApiState, Depends(api_state)],
    since: Annotated[int | None, Query(ge=-1, le=MAX_INDEX)] = None,
    backlog: Annotated[int, Query(ge=0, le=SNAPSHOT_MAX_LIMIT)] = 20,
    stream_id: str | None = None,
    lanes: str | None = None,
    last_event_id: Annotated[str | None, Header()] = None,
    start: Annotated[int | None, Query(alias="from", ge=0, le=MAX_INDEX)] = None,
) -> EventSourceResponse | JSONResponse:
    """Live events of the caller's tenant as SSE (`id: <index>`, `event: envelope`). Resumes
    after `Last-Event-ID`, else starts at `from` (inclusive), else after `since` (exclusive, as
    the published DBL gateway and `Last-Event-ID`), else with the last `backlog` events."""
    if start is not None and since is not None:
        return error_response(
            422,
            "request.invalid_parameter",
            "give either `from` (first index sent) or `since` (last index already seen), not both",
        )
    if start is not None:
        since = start - 1
    principal = request_principal(request)
    tenant = principal.tenant_id
    streams = stream_slots(request)
    if not await streams.try_acquire_async(principal.limit_key):
        return too_many_streams(streams.per_key)
    lane_list = [part for part in (lanes or "").split(",") if part] or None
    if last_event_id and last_event_id.strip().lstrip("-").isdigit():
        since = max(-1, min(int(last_event_id), MAX_INDEX))
    store, watcher = state.store, state.watcher

    def matches(event: Event) -> bool:
        return event_matches(event, stream_id=stream_id, lanes=lane_list, tenant_id=tenant)

    async def events() -> AsyncIterator[dict[str, str]]:
        if since is None:
            first = await asyncio.to_thread(
                store.last, backlog, stream_id=stream_id, lanes=lane_list, tenant_id=tenant
            )
            cursor = first[-1].index if first else (await asyncio.to_thread(store.head))[0] - 1
        else:
            first, cursor = [], since
        for event in first:
            yield _sse(event)
        while not await request.is_disconnected():
            generation = watcher.generation
            # near the head: the events the watcher just read, filtered in memory
            served = watcher.recent_since(cursor, TAIL_BATCH, matches)
            if served is None:
                batch = await asyncio.to_thread(
                    store.since,
                    cursor,
                    limit=TAIL_BATCH,
                    stream_id=stream_id,
                    lanes=lane_list,
                    tenant_id=tenant,
                )
                served = batch, batch[-1].index if batch else cursor
            batch, after = served
            for event in batch:
                yield _sse(event)
            cursor = after
            if len(batch) < TAIL_BATCH:
                await watcher.wait_change(generation, TAIL_PING_S)

    return EventSourceResponse(streams.hold(principal.limit_key, events()), ping=TAIL_PING_S)


def _limits_scope(request: Request) -> str:
    limits = getattr(request.app.state, "limits", None)
    return limits.scope if limits is not None else "process"


@router.get("/capabilities", response_model=None, responses={200: {"model": Capabilities}})
def capabilities(
    request: Request,
    state: Annotated[ApiState, Depends(api_state)],
    format: Annotated[Literal["turngate", "gateway.v1"], Query()] = "turngate",
) -> dict[str, Any]:
    """What this gateway offers: providers, models, intent types, limits and config digests
    (`turngate.capabilities.1`); `format=gateway.v1`: the same in the published DBL gateway's
    `gateway.capabilities.v1` shape."""
    boundary, settings = state.boundary, state.settings
    if format == "gateway.v1":
        return gateway_v1_capabilities(boundary, settings)
    return {
        "schema_version": CAPABILITIES_SCHEMA_VERSION,
        "gateway": "turngate",
        "version": __version__,
        "interface_version": INTERFACE_VERSION,
        "intent_types": sorted(KNOWN_INTENT_TYPES | set(JOB_TYPES)),
        "providers": boundary.provider_catalog.model_dump(mode="json"),
        "policy": {
            "module": boundary.policy_module,
            "object": boundary.policy_object,
            "observer_mode": boundary.policy_module is None,
        },
        "limits": {
            "max_body_bytes": settings.max_body_bytes,
            "max_message_bytes": settings.max_message_bytes,
            "max_refs": boundary.context_config.context.max_refs,
            "llm_wall_clock_s": settings.llm_wall_clock_s,
            "llm_concurrency": settings.llm_concurrency,
            "turn_queue_max": settings.turn_queue_max,
            "snapshot_max_limit": SNAPSHOT_MAX_LIMIT,
            "max_declared_refs": settings.max_declared_refs,
            "max_declared_tools": settings.max_declared_tools,
            "max_json_depth": MAX_JSON_DEPTH,
            "max_id_chars": MAX_ID_CHARS,
            "rate_limit_per_s": settings.rate_limit_per_s,
            "rate_limit_burst": settings.rate_limit_burst,
            "max_streams_per_key": settings.max_streams_per_key,
            "job_queue_max": settings.job_queue_max,
            "job_concurrency": {
                "case.ingest": settings.job_concurrency_ingest,
                "case.embed": settings.job_concurrency_embed,
                "case.index": settings.job_concurrency_index,
            },
            "job_wall_clock_s": {
                "case.ingest": settings.job_wall_clock_ingest_s,
                "case.embed": settings.job_wall_clock_embed_s,
                "case.index": settings.job_wall_clock_index_s,
            },
            "max_upload_bytes": settings.max_upload_bytes,
            # where the rate and stream counts live: "process" or "redis" (TURNGATE_LIMITS_URL)
            "limits_scope": _limits_scope(request),
        },
        # How callers authenticate (never a key): docs/SECURITY.md.
        "auth": {
            "mode": settings.auth_mode,
            "scheme": "bearer",
            "roles": sorted(ROLES),
            "public": sorted(p for p, role in ROUTE_ROLES.items() if role == PUBLIC),
            # Opt-in keyless read-only mode: these GET routes need no key while it is on.
            "keyless_read": sorted(KEYLESS_READ_ROUTES) if settings.keyless_read else [],
        },
        "config_digests": {"context_config_digest": boundary.context_config_digest},
        "surfaces": [
            "/ingress/intent",
            "/turns/{correlation_id}/stream",
            "/snapshot",
            "/tail",
            "/status",
            "/capabilities",
            "/verify",
            "/jobs",
            "/cases/{case_id}",
            "/artifacts",
            "/healthz",
            "/metrics",
        ],
        "streaming": {
            "events": ["token", "reset", "redact", "done"],
            "bus": state.settings.effective_token_bus_url.split(":", 1)[0],
        },
    }


@router.get("/status", response_model=None, responses={200: {"model": Status}})
async def status(request: Request, state: Annotated[ApiState, Depends(api_state)]) -> dict[str, Any]:
    """Runtime status: ledger head, running turns, LLM queue and each actor's position in it
    (a tenant-scoped caller sees its own tenant's actors only: actors are tenant data; counts
    and positions in the one shared queue are not). Temporal's address, namespace and missing
    search attributes only for an operator (an unscoped admin)."""
    principal = request_principal(request)
    tenant = principal.tenant_id
    length, head = await asyncio.to_thread(state.store.head)
    turns: dict[str, Any] = {"running": None}
    queue_position: dict[str, int] = {}
    temporal_ok = True
    try:
        running = [
            wf
            async for wf in state.client.list_workflows(
                "WorkflowType='TurnWorkflow' AND ExecutionStatus='Running'",
                limit=1000,
                rpc_timeout=timedelta(seconds=state.settings.temporal_rpc_timeout_s),
            )
        ]
        turns["running"] = len(running)
        # Waiting for or in a provider call, oldest first: an actor's position is its earliest turn.
        allowed = sorted(
            (wf for wf in running if _sa(wf, "TurngateDecision") == "ALLOW"), key=lambda wf: wf.start_time
        )
        for position, wf in enumerate(allowed, start=1):
            actor = _sa(wf, "TurngateActor")
            visible = tenant is None or _sa(wf, "TurngateTenantId") == tenant
            if actor and visible and actor not in queue_position:
                queue_position[actor] = position
        turns["in_llm_stage"] = len(allowed)
    except Exception as exc:  # status must answer even when Temporal does not
        temporal_ok = False
        log.warning("status: temporal visibility query failed: %s", exc)
    jobs: dict[str, Any] = {"queue_sizes": {}, "active_counts": {}}
    if temporal_ok:
        try:
            jobs = await job_runtime(
                state.client,
                queue_max=state.settings.job_queue_max,
                queues=job_queues(state.settings),
                concurrency=job_concurrency(state.settings),
            )
        except Exception as exc:
            log.warning("status: job runtime query failed: %s", exc)
    workers, effective = None, None
    if temporal_ok:
        try:
            workers, effective = await llm_capacity(
                state.client, state.settings.llm_task_queue, state.settings.llm_concurrency
            )
        except Exception as exc:
            log.warning("status: llm task queue query failed: %s", exc)
    job_types = {t: state.settings.job_queue_max for t in JOB_TYPES}
    return {
        "schema_version": STATUS_SCHEMA_VERSION,
        "ok": temporal_ok,
        "gateway": "turngate",
        "version": __version__,
        "temporal": {"reachable": temporal_ok} | _infrastructure(request, state, principal),
        "ledger": {"length": length, "head_digest": head},
        "auth": _auth_status(state),
        # Budgets in effect with their spend: all tenants for an operator, else the caller's own.
        "budgets": (await asyncio.to_thread(budget_status, state.store, tenant))["budgets"],
        "job_runtime": {
            # chat.message: turns allowed and waiting for or in a provider call; case.*: jobs
            # waiting for a slot (queue_sizes) and running (active_counts), over all tenants.
            "queue_sizes": {"chat.message": turns.get("in_llm_stage")} | jobs["queue_sizes"],
            "active_counts": {"turns": turns["running"]} | jobs["active_counts"],
            "queue_max": {"chat.message": state.settings.turn_queue_max} | job_types,
            "concurrency": {
                "chat.message": state.settings.llm_concurrency,
                "case.ingest": state.settings.job_concurrency_ingest,
                "case.embed": state.settings.job_concurrency_embed,
                "case.index": state.settings.job_concurrency_index,
            },
            # case.*: the worker processes polling each job queue now, and how many jobs of the
            # type can run at once across them (the concurrency, a global limit; 0: no worker)
            "job_workers": jobs.get("workers", {}),
            "effective_concurrency": jobs.get("effective_concurrency", {}),
            # This API process's admitted, unfinished turns (TURNGATE_TURN_QUEUE_MAX applies to it).
            "admission": request.app.state.turn_slots.status(),
            "llm": {
                "concurrency": state.settings.llm_concurrency,
                # Over every worker process polling the LLM queue (null: Temporal not asked).
                "worker_processes": workers,
                "effective_concurrency": effective,
                "wall_clock_s": state.settings.llm_wall_clock_s,
                "queue_position": queue_position,
            },
        },
    }


def _auth_status(state: ApiState) -> dict[str, Any]:
    """How callers get in; the keyless read-only mode is said out loud while it is on."""
    settings = state.settings
    answer: dict[str, Any] = {"mode": settings.auth_mode, "keyless_read": settings.keyless_read}
    if settings.keyless_read:
        answer["warning"] = (
            "keyless read-only mode is on: /snapshot, /tail, /status and /capabilities answer "
            "requests without a key"
        )
    return answer


def _infrastructure(request: Request, state: ApiState, principal: Principal) -> dict[str, Any]:
    """Where Temporal is and what it lacks: for operators (an unscoped admin) only. Any other
    key learns whether it is reachable, never an address a tenant has no business knowing."""
    if principal.tenant_id is not None or ROLE_ADMIN not in principal.roles:
        return {}
    return {
        "address": state.client.service_client.config.target_host,
        "namespace": state.client.namespace,
        # Registration refused (Temporal Cloud): turns fail until an operator adds these.
        "missing_search_attributes": _missing_search_attributes(request),
    }


def _missing_search_attributes(request: Request) -> list[str]:
    registered = getattr(request.app.state, "search_attributes", None)
    return list(registered.missing) if registered is not None else []


def _sa(wf: Any, name: str) -> str | None:
    values = (wf.search_attributes or {}).get(name) or []
    return str(values[0]) if values else None


@router.get("/verify", response_model=None, responses={200: {"model": VerifyReport}})
async def verify(
    request: Request,
    state: Annotated[ApiState, Depends(api_state)],
    thread_id: str | None = None,
    since: Annotated[int | None, Query(ge=0, le=MAX_INDEX)] = None,
    until: Annotated[int | None, Query(ge=0, le=MAX_INDEX)] = None,
) -> dict[str, Any] | JSONResponse:
    """Recompute digests, chain links, DECISION context digests and artifact pointers for a
    thread or an index range (the whole ledger when neither is given). Never repairs anything.

    A tenant-scoped key verifies one of its threads (`thread_id` is required); another tenant's
    thread answers exactly like a thread that does not exist."""
    from turngate.audit import verify_all

    tenant = request_principal(request).tenant_id
    scope_thread = thread_id
    if tenant is not None:
        if thread_id is None:
            return error_response(
                422,
                "verify.thread_required",
                "a tenant-scoped key verifies one thread at a time: pass ?thread_id= "
                "(the whole ledger: an operator key, tenant '*', or `turngate verify`)",
            )
        if await asyncio.to_thread(state.store.thread_has_other_tenant, thread_id, tenant):
            scope_thread = f"{NO_SUCH_THREAD}{uuid.uuid4().hex}"  # verify nothing, answer as absent
    config = state.settings.context_config()
    report = await asyncio.to_thread(
        verify_all,
        state.store,
        artifacts=state.artifacts,
        context_config=config,
        thread_id=scope_thread,
        since_index=since,
        until_index=until,
    )
    if scope_thread != thread_id:
        report = report.model_copy(update={"thread_id": thread_id})
    default_metrics().record_verify(report.failures)
    return report.model_dump(mode="json")


@router.get("/healthz", response_model=None, responses={200: {"model": Health}})
async def healthz(
    request: Request, state: Annotated[ApiState, Depends(api_state)]
) -> JSONResponse | dict[str, Any]:
    """Liveness + readiness: the ledger answers and Temporal is reachable. During a ledger
    outage: 503 `ledger.unavailable` with `ledger: "down"` and `Retry-After` (at once while the
    outage's probe has not seen the ledger again); on a full SQLite ledger disk: 503
    `ledger.disk_full` with `ledger: "disk_full"`. Public, so the
    answer never carries the underlying error (which names hosts, ports and databases): that
    goes to the log."""
    outage: LedgerOutage = request.app.state.ledger_outage
    detail = "the ledger database does not answer; retry"
    body = {"ok": False, "reason_code": "ledger.unavailable", "detail": detail, "ledger": "down"}
    if outage.down_since is not None:  # known: the outage's probe says when it is over
        return JSONResponse(body, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})
    try:
        length, _ = await asyncio.to_thread(state.store.head)
    except LedgerUnavailableError as exc:
        outage.failed(exc)
        return JSONResponse(body, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})
    disk: LedgerDiskGuard = request.app.state.ledger_disk
    if not disk.has_room():
        body = {
            "ok": False,
            "reason_code": "ledger.disk_full",
            "detail": "the ledger's disk is full; new intents are refused until space returns",
            "ledger": "disk_full",
        }
        return JSONResponse(body, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})
    try:
        await asyncio.wait_for(state.client.service_client.check_health(), 2.0)
    except Exception as exc:
        log.warning("healthz: temporal health check failed: %s", exc)
        return error_response(503, "temporal.unavailable", "the workflow service does not answer; retry")
    return {"ok": True, "ledger": "up", "ledger_length": length}
