"""JSON read endpoints for the observer web UI (``/ui/api/...``); read-only, tenant-filtered.

The UI also uses the public surfaces (``/snapshot``, ``/tail``, ``/verify``, ``/status``); these
endpoints add what those do not offer: a list of threads, one page of a thread's turns as
summaries (INTENT -> DECISION -> EXECUTION joined by correlation id), one turn with its events,
and the artifacts (manifests, prompt snapshots, fault snapshots) that a turn's events point to.

Tenant isolation: when the auth layer has set ``request.state.tenant_id`` every answer is limited
to that tenant's events (``None`` means no filter: unauthenticated dev mode); the store filters
on the events' ``tenant_id`` column. Every ledger read goes through
:class:`~turngate.ledger.LedgerStore`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from temporalio.service import RPCError

from turngate import __version__
from turngate.api.error_responses import error_response
from turngate.api.state import ApiState, api_state
from turngate.artifacts import ArtifactError, ArtifactNotFoundError, is_content_addressed
from turngate.artifacts.restricted import is_restricted_artifact
from turngate.core.client_context import ClientContext, recorded_client_context
from turngate.core.events import Event, EventKind
from turngate.core.manifest import ArtifactPointer, parse_pointer
from turngate.core.pointers import server_pointers
from turngate.core.shadow import shadow_agreements
from turngate.ledger.thread_list import ThreadFilter
from turngate.security.auth import request_principal
from turngate.security.principal import ROLE_ADMIN
from turngate.workflows.shared import legacy_turn_workflow_id, turn_workflow_id

log = logging.getLogger(__name__)
router = APIRouter(prefix="/ui/api", tags=["ui"])

DEFAULT_TEMPORAL_UI_URL = "http://127.0.0.1:8233"
#: One turn page looks its workflow up in Temporal (which id format it has), bounded.
DESCRIBE_TIMEOUT = timedelta(seconds=2)
THREADS_MAX_LIMIT = 200
TURNS_MAX_LIMIT = 200
#: Text longer than this is cut in turn summaries (the turn endpoint returns whole events).
SUMMARY_TEXT_CHARS = 2000
#: Upper bound of ``offset`` (JSON-safe, far below the 64-bit integers databases accept).
OFFSET_MAX = 2**53 - 1
#: Query text: no NUL (PostgreSQL text cannot hold it).
NO_NUL = r"^[^\x00]*$"
#: Artifacts larger than this are not served to the browser.
ARTIFACT_MAX_BYTES = 2 * 1024 * 1024


# --------------------------------------------------------------------------- tenants


def caller_tenant(request: Request) -> str | None:
    """The tenant the auth layer bound this request to; ``None``: no tenant filter."""
    tenant = getattr(request.state, "tenant_id", None)
    return None if tenant is None else str(tenant)


# --------------------------------------------------------------------------- config


@router.get("/config")
async def ui_config(request: Request, state: Annotated[ApiState, Depends(api_state)]) -> dict[str, Any]:
    """What the UI needs to know: version, the Temporal UI base URL and namespace, page limits.
    Also the UI's sign-in check: it answers only when the caller's key is accepted."""
    settings = state.settings
    base = getattr(settings, "temporal_ui_url", None) or DEFAULT_TEMPORAL_UI_URL
    length, _ = await asyncio.to_thread(state.store.head)
    return {
        "gateway": "turngate",
        "version": __version__,
        "temporal_ui_url": str(base).rstrip("/"),
        "temporal_namespace": state.client.namespace,  # as connected (a profile may name it)
        "tenant_scoped": caller_tenant(request) is not None,
        # Where a live /tail should start (?since=) so that nothing after this answer is missed.
        "head_index": length - 1,
        "limits": {"threads": THREADS_MAX_LIMIT, "turns": TURNS_MAX_LIMIT},
        "jobs": {"available": False, "detail": "job workflows (ingest, embed, index) are not built yet"},
    }


# --------------------------------------------------------------------------- threads


def _iso(value: str | None, name: str) -> str | None:
    """A time filter as the ledger stores timestamps (ISO-8601 UTC, ``Z``), or a ValueError."""
    if value is None or not value.strip():
        return None
    moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"{name}: give a UTC offset or Z (e.g. 2026-11-24T06:00:00Z)")
    from turngate.artifacts.store import format_timestamp

    return format_timestamp(moment)


def list_threads(
    state: ApiState,
    tenant: str | None,
    *,
    q: str | None,
    actor: str | None,
    decision: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    offset: int,
    before: int | None = None,
) -> dict[str, Any]:
    """A page of the thread summary (see :mod:`turngate.ledger.thread_list`)."""
    wanted = ThreadFilter(tenant, q=q, actor=actor, decision=decision, since=since, until=until)
    page, head = state.store.thread_page(wanted, limit=limit, offset=offset, before=before)
    threads = [
        {
            "thread_id": row.thread_id,
            "tenant_id": row.tenant_id,
            "events": row.events,
            "turns": row.turns,
            "allowed": row.allowed,
            "denied": row.denied,
            "errors": row.errors,
            "pending": row.pending,
            "first_index": row.first_index,
            "last_index": row.last_index,
            "first_at": row.first_at,
            "last_at": row.last_at,
            "actors": row.actors,
            "actor_count": row.actor_count,
        }
        for row in page.threads
    ]
    return {
        "total": page.total,
        "total_exact": page.total_exact,
        "offset": offset,
        "limit": limit,
        "before": before,
        "next_before": page.next_before,
        "head_index": head,
        "threads": threads,
    }


@router.get("/threads", response_model=None)
async def threads(
    request: Request,
    state: Annotated[ApiState, Depends(api_state)],
    q: Annotated[str | None, Query(max_length=200, pattern=NO_NUL, description="thread id contains")] = None,
    actor: Annotated[str | None, Query(max_length=200, pattern=NO_NUL)] = None,
    decision: Annotated[str | None, Query(pattern="^(ALLOW|DENY|error|pending)$")] = None,
    since: Annotated[str | None, Query(max_length=64, description="active since (ISO-8601 UTC)")] = None,
    until: Annotated[str | None, Query(max_length=64, description="active until (ISO-8601 UTC)")] = None,
    limit: Annotated[int, Query(ge=1, le=THREADS_MAX_LIMIT)] = 50,
    offset: Annotated[int, Query(ge=0, le=OFFSET_MAX)] = 0,
    before: Annotated[
        int | None,
        Query(ge=0, le=OFFSET_MAX, description="keyset page: threads last active before this index"),
    ] = None,
) -> dict[str, Any] | JSONResponse:
    """Threads, most recently active first, with turn counts by decision. Filters: thread id
    substring, an actor that took part, a decision that occurred, an activity window. Deep pages:
    pass the previous page's ``next_before`` as ``before`` (a seek, whatever the depth)."""
    tenant = caller_tenant(request)
    try:
        since_iso, until_iso = _iso(since, "since"), _iso(until, "until")
    except (ValueError, OverflowError) as exc:
        return error_response(422, "request.invalid_parameter", str(exc))
    return await asyncio.to_thread(
        list_threads,
        state,
        tenant,
        q=q,
        actor=actor,
        decision=decision,
        since=since_iso,
        until=until_iso,
        limit=limit,
        offset=offset,
        before=before,
    )


# --------------------------------------------------------------------------- turns


def _cut(text: Any, limit: int = SUMMARY_TEXT_CHARS) -> tuple[str, bool]:
    value = text if isinstance(text, str) else ("" if text is None else json.dumps(text))
    return (value[:limit], True) if len(value) > limit else (value, False)


def _ms_between(start: str | None, end: str | None) -> int | None:
    if not start or not end:
        return None
    try:
        a = datetime.fromisoformat(start.replace("Z", "+00:00"))
        b = datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0, round((b - a).total_seconds() * 1000))


def workflow_link(state: ApiState, intent: Event, workflow_id: str | None = None) -> dict[str, str]:
    """The turn's workflow id (the current format, tenant included, unless ``workflow_id`` says
    otherwise) and its page in the Temporal UI."""
    settings = state.settings
    if workflow_id is None:
        workflow_id = turn_workflow_id(
            intent.stream_id,
            intent.thread_id,
            intent.turn_id,
            settings.workflow_id_prefix,
            tenant_id=intent.tenant_id,
        )
    base = str(getattr(settings, "temporal_ui_url", None) or DEFAULT_TEMPORAL_UI_URL).rstrip("/")
    namespace = quote(state.client.namespace, safe="")
    url = f"{base}/namespaces/{namespace}/workflows/{quote(workflow_id, safe='')}"
    return {"workflow_id": workflow_id, "url": url}


async def turn_workflow_link(state: ApiState, intent: Event) -> dict[str, str]:
    """:func:`workflow_link` for the workflow that exists: a turn started by an earlier version
    (before the tenant was part of the id) keeps its older id while Temporal holds its history."""
    link = workflow_link(state, intent)
    legacy = legacy_turn_workflow_id(
        intent.stream_id, intent.thread_id, intent.turn_id, state.settings.workflow_id_prefix
    )
    for workflow_id in (link["workflow_id"], legacy):
        try:
            await state.client.get_workflow_handle(workflow_id).describe(rpc_timeout=DESCRIBE_TIMEOUT)
        except RPCError:
            continue  # absent (or Temporal unreachable: the current format is the best guess)
        return workflow_link(state, intent, workflow_id)
    return link


def turn_summary(state: ApiState, turn: Sequence[Event]) -> dict[str, Any]:
    """One turn at a glance from its events (any of INTENT, DECISION, EXECUTION may be missing
    while the turn runs; a DENY has no EXECUTION)."""
    by_kind = {str(e.kind): e for e in turn}
    intent, decision, execution = by_kind.get("INTENT"), by_kind.get("DECISION"), by_kind.get("EXECUTION")
    first = intent or decision or execution
    assert first is not None
    summary: dict[str, Any] = {
        "correlation_id": first.correlation_id,
        "thread_id": first.thread_id,
        "turn_id": first.turn_id,
        "parent_turn_id": first.parent_turn_id,
        "actor": first.actor,
        "stream_id": first.stream_id,
        "lane": first.lane,
        "intent_type": first.intent_type,
        "intent": None,
        "decision": None,
        "execution": None,
    }
    if intent is not None:
        body = intent.payload.get("payload") or {}
        message, cut = _cut(body.get("message"))
        summary["intent"] = {
            "index": intent.index,
            "digest": intent.digest,
            "created_at": intent.created_at,
            "message": message,
            "message_cut": cut or bool(body.get("message_truncated")),
            "requested_model_id": intent.payload.get("requested_model_id"),
            "declared_refs": len(intent.payload.get("declared_refs") or []),
            "temperature": (recorded_client_context(intent.payload) or ClientContext()).temperature,
        }
        summary["workflow"] = workflow_link(state, intent)
    if decision is not None:
        p = decision.payload
        error = p.get("error") if isinstance(p.get("error"), dict) else None
        summary["decision"] = {
            "index": decision.index,
            "digest": decision.digest,
            "created_at": decision.created_at,
            "decision": p.get("decision"),
            "reason_codes": p.get("reason_codes") or [],
            "policy_id": p.get("policy_id") or (p.get("policy") or {}).get("policy_id"),
            "provider": p.get("provider"),
            "model_id": p.get("resolved_model_id"),
            "context_digest": p.get("context_digest"),
            "error_code": error.get("code") if error else None,
            "shadow_disagreements": [
                {k: entry.get(k) for k in ("policy_id", "policy_version", "decision", "reason_codes")}
                for entry, agrees in shadow_agreements(p)
                if not agrees
            ],
        }
    if execution is not None:
        p = execution.payload
        error = p.get("error") if isinstance(p.get("error"), dict) else None
        answer, cut = _cut(p.get("output_text"))
        usage = raw_usage if isinstance(raw_usage := p.get("usage"), dict) else {}
        obs = raw_obs if isinstance(raw_obs := p.get("_obs"), dict) else {}
        summary["execution"] = {
            "index": execution.index,
            "digest": execution.digest,
            "created_at": execution.created_at,
            "provider": p.get("provider"),
            "model_id": p.get("model_id") or p.get("resolved_model_id"),
            "answer": answer,
            "answer_cut": cut or bool(p.get("output_truncated")),
            "error": {"code": error.get("code"), "message": error.get("message")} if error else None,
            "redacted": bool(p.get("redacted")),
            "redaction_code": (p.get("redaction") or {}).get("reason_code") if p.get("redacted") else None,
            "input_tokens": usage.get("input_tokens"),
            "output_tokens": usage.get("output_tokens"),
            "provider_ms": obs.get("duration_ms"),
            "latency_ms": _ms_between(intent.created_at if intent else None, execution.created_at),
            "fault_snapshots": sorted((p.get("fault_snapshots") or {}).keys()),
        }
    verdict = summary["decision"]["decision"] if summary["decision"] else None
    if verdict is None:
        status = "pending"
    elif verdict == "DENY":
        status = "denied"
    elif summary["execution"] is None:
        status = "running"
    elif summary["execution"]["error"]:
        status = "error"
    elif summary["execution"]["redacted"]:
        status = "redacted"
    else:
        status = "done"
    summary["status"] = status
    return summary


def _group_turns(rows: Sequence[Event]) -> dict[str, list[Event]]:
    grouped: dict[str, list[Event]] = {}
    for event in rows:
        grouped.setdefault(event.correlation_id, []).append(event)
    return grouped


def thread_turns(
    state: ApiState, tenant: str | None, thread_id: str, offset: int, limit: int
) -> dict[str, Any]:
    """One page of a thread's turns, by INTENT order: two indexed queries, whatever the length."""
    page = state.store.turn_page(thread_id, tenant_id=tenant, offset=offset, limit=limit)
    intents, others = page.intents, _group_turns(page.others)
    turns = []
    for position, intent in enumerate(intents):
        summary = turn_summary(state, [intent, *others.get(intent.correlation_id, [])])
        summary["position"] = offset + position
        turns.append(summary)
    return {
        "thread_id": thread_id,
        "total_turns": page.turns,
        "events": page.events,
        "first_index": page.first_index,
        "last_index": page.last_index,
        "head_index": page.head_index,
        "offset": offset,
        "limit": limit,
        "turns": turns,
    }


@router.get("/turns")
async def turns(
    request: Request,
    state: Annotated[ApiState, Depends(api_state)],
    thread_id: Annotated[str, Query(min_length=1, max_length=400, pattern=NO_NUL)],
    offset: Annotated[int, Query(ge=0, le=OFFSET_MAX)] = 0,
    limit: Annotated[int, Query(ge=1, le=TURNS_MAX_LIMIT)] = 50,
) -> dict[str, Any]:
    """A page of one thread's turns (oldest first; ``offset`` counts turns), each as a summary:
    decision and reason codes, answer, provider/model, latency, tokens, status."""
    return await asyncio.to_thread(thread_turns, state, caller_tenant(request), thread_id, offset, limit)


def load_turn(state: ApiState, tenant: str | None, correlation_id: str) -> list[Event]:
    return state.store.by_correlation(correlation_id, tenant_id=tenant)


@router.get("/turn", response_model=None)
async def turn(
    request: Request,
    state: Annotated[ApiState, Depends(api_state)],
    correlation_id: Annotated[str, Query(min_length=1, max_length=200, pattern=NO_NUL)],
) -> dict[str, Any] | JSONResponse:
    """One turn: its summary, its events as /snapshot serves them, and the ledger head (so the
    UI can show each event's position in the hash chain)."""
    found = await asyncio.to_thread(load_turn, state, caller_tenant(request), correlation_id)
    if not found:
        return error_response(404, "ui.turn_not_found", f"no turn with correlation_id {correlation_id!r}")
    length, head = await asyncio.to_thread(state.store.head)
    if caller_tenant(request) is not None:
        head = None  # the newest event may be another tenant's: its digest is not shown
    summary = turn_summary(state, found)
    intent = next((e for e in found if e.kind == EventKind.INTENT), None)
    if intent is not None:
        summary["workflow"] = await turn_workflow_link(state, intent)
    return {
        "summary": summary,
        "events": [event.to_wire() for event in found],
        "ledger": {"length": length, "head_digest": head},
    }


#: What any artifact that cannot be served answers: absent, not pointed to by this turn's own
#: server-written fields, or a pointer whose path is not its sha256's. One answer for all, so it
#: tells nothing about what exists.
ARTIFACT_NOT_FOUND = ("ui.artifact_not_found", "this turn's events point to no such artifact")


def turn_pointer(turn: Sequence[Event], artifact_id: str) -> ArtifactPointer | None:
    """The content-addressed pointer to ``artifact_id`` that the gateway wrote into one of these
    events; ``None`` when there is none (pointer-shaped client data never counts)."""
    for event in turn:
        for raw in server_pointers(str(event.kind), event.payload):
            if artifact_id not in (raw.get("artifact_id"), raw.get("sha256")):
                continue
            try:
                pointer = parse_pointer(raw)
            except ValueError:
                continue
            if is_content_addressed(pointer):
                return pointer
    return None


@router.get("/artifact", response_model=None)
async def artifact(
    request: Request,
    state: Annotated[ApiState, Depends(api_state)],
    correlation_id: Annotated[str, Query(min_length=1, max_length=200, pattern=NO_NUL)],
    artifact_id: Annotated[str, Query(pattern=r"^sha256:[0-9a-f]{64}$")],
) -> dict[str, Any] | JSONResponse:
    """An artifact that one of this turn's events points to (a context manifest, the pinned
    prompt snapshot, a fault snapshot, fetched handle text, an offloaded message or answer),
    parsed when it is JSON. Only pointers the gateway wrote into the caller's own turn are served,
    and only at the path their sha256 names: nothing else in the store is reachable from here."""
    found = await asyncio.to_thread(load_turn, state, caller_tenant(request), correlation_id)
    parsed = turn_pointer(found, artifact_id)
    if parsed is None:
        return error_response(404, *ARTIFACT_NOT_FOUND)
    if parsed.size_bytes > ARTIFACT_MAX_BYTES:
        return error_response(
            413,
            "ui.artifact_too_large",
            f"{parsed.size_bytes} bytes; the UI shows at most {ARTIFACT_MAX_BYTES}",
        )
    try:
        restricted = await asyncio.to_thread(is_restricted_artifact, state.artifacts, parsed)
        if restricted and not request_principal(request).may(ROLE_ADMIN):
            return error_response(
                403, "auth.forbidden", "a redacted answer's snapshot is readable by admin keys only"
            )
        data = await asyncio.to_thread(state.artifacts.get, parsed)
    except ArtifactNotFoundError:
        return error_response(404, *ARTIFACT_NOT_FOUND)
    except ArtifactError as exc:
        log.warning("artifact %s not read: %s", artifact_id, exc)
        return error_response(503, "artifact.unavailable", "the artifact store could not be read; retry")
    try:
        content: Any = json.loads(data)
        media = "json"
    except ValueError:
        content = data.decode("utf-8", errors="replace")
        media = "text"
    return {"pointer": parsed.model_dump(mode="json"), "media": media, "content": content}
