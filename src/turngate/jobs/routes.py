"""Case jobs over HTTP: submission (from ``POST /ingress/intent``), ``/jobs``, ``/cases``, uploads.

A job is admitted only while its type has fewer than ``TURNGATE_JOB_QUEUE_MAX`` open jobs;
beyond that the answer is 503 ``queue.full`` and nothing is stored or started. Every read is
within the caller's tenant: another tenant's job or case answers 404, like an absent one.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from turngate.api.error_responses import admission_response, error_response
from turngate.api.openapi import ArtifactStored, CaseSummary, JobList, JobView
from turngate.api.state import ApiState, api_state
from turngate.artifacts import ArtifactError, aput
from turngate.core.events import AdmissionError
from turngate.core.manifest import ArtifactPointer
from turngate.jobs.cases.registry import CaseRecord, CaseRegistry, RecordKind
from turngate.jobs.control import (
    ANY_TENANT,
    cancel_job,
    count_open_jobs,
    get_job_status,
    list_jobs,
    start_job,
)
from turngate.jobs.domain.intents import (
    EmbedBody,
    IndexBody,
    IngestBody,
    JobIntent,
    embedder_spec,
    job_id_for,
    parse_job_intent,
)
from turngate.jobs.domain.models import (
    FINAL_STATES,
    DocumentRef,
    EmbedInput,
    IndexInput,
    IngestInput,
    JobOptions,
    JobStatus,
    JobType,
)
from turngate.jobs.domain.queues import job_concurrency, job_queues
from turngate.security.auth import request_principal
from turngate.security.principal import Principal
from turngate.security.uploads import is_own_upload, upload_kind
from turngate.settings import Settings

log = logging.getLogger(__name__)
router = APIRouter()
QUEUE_FULL_RETRY_AFTER_S = 5
JobInput = IngestInput | EmbedInput | IndexInput


class _Refused(Exception):
    def __init__(self, status: int, reason_code: str, detail: str) -> None:
        super().__init__(detail)
        self.response = error_response(status, reason_code, detail)


def registry(state: ApiState) -> CaseRegistry:
    return CaseRegistry(state.store.engine)


# --------------------------------------------------------------------------- submission


async def submit_job(request: Request, state: ApiState, data: dict[str, Any]) -> JSONResponse:
    """``POST /ingress/intent`` for a ``case.*`` intent: 202 with the job id once it is started."""
    principal = request_principal(request)
    try:
        intent, body = parse_job_intent(data)
    except AdmissionError as exc:
        return admission_response(exc)
    job_type = intent.job_type
    job_id = job_id_for(
        job_type,
        state.settings.job_queue_prefix,
        principal.tenant_id,
        intent.correlation_id,
        case_id=body.case_id,
    )
    try:
        existing = await _existing(state.client, job_id)
        if existing is None:
            await _check_queue(state, job_type)
            job_input = await _job_input(state, principal, intent, body)
            existing = await _start(
                state,
                job_type,
                job_input,
                job_id,
                correlation_id=intent.correlation_id,
                web_url=str(request.base_url),
            )
            deduplicated = existing is not None
        else:
            deduplicated = True
    except _Refused as refused:
        return refused.response
    except RPCError as exc:
        log.warning("could not start job %s: %s", job_id, exc)
        return error_response(503, "temporal.unavailable", "the workflow service is unreachable; retry")
    return JSONResponse(
        {
            "accepted": True,
            "job_id": job_id,
            "job_type": job_type,
            "case_id": body.case_id,
            "state": existing.state if existing else "queued",
            "deduplicated": deduplicated,
            "status_url": f"/jobs/{job_id}",
        },
        status_code=202,
    )


async def _existing(client: Client, job_id: str) -> JobStatus | None:
    try:
        return await get_job_status(client, job_id, with_result=False)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    except LookupError:
        return None


async def _check_queue(state: ApiState, job_type: JobType) -> None:
    limit = state.settings.job_queue_max
    if await count_open_jobs(state.client, job_type, queues=job_queues(state.settings)) >= limit:
        refused = _Refused(
            503,
            "queue.full",
            f"{limit} {job_type} jobs are queued or running (TURNGATE_JOB_QUEUE_MAX); retry later",
        )
        refused.response.headers["Retry-After"] = str(QUEUE_FULL_RETRY_AFTER_S)
        raise refused


async def _start(
    state: ApiState,
    job_type: JobType,
    job_input: JobInput,
    job_id: str,
    *,
    correlation_id: str,
    web_url: str,
) -> JobStatus | None:
    """Start the job; the status of the one already there when another request won the race."""
    try:
        await start_job(
            state.client,
            job_type,
            job_input,
            job_id=job_id,
            queues=job_queues(state.settings),
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            correlation_id=correlation_id,
            web_url=web_url,
        )
    except WorkflowAlreadyStartedError:
        return await _existing(state.client, job_id)
    return None


async def _job_input(
    state: ApiState, principal: Principal, intent: JobIntent, body: IngestBody | EmbedBody | IndexBody
) -> JobInput:
    owner = {"case_id": body.case_id, "tenant_id": principal.tenant_id, "key_id": principal.key_id}
    options = JobOptions(
        wall_clock_s=_wall_clock(state.settings, intent.job_type),
        checkpoint_items=state.settings.job_checkpoint_items,
        step_s=state.settings.job_step_s,
        # the job type's concurrency holds across every worker process (slot workflows)
        slots=job_concurrency(state.settings).for_type(intent.job_type),
    )
    if isinstance(body, IngestBody):
        documents = [
            await _document(state, principal.tenant_id, n, doc) for n, doc in enumerate(body.documents)
        ]
        return IngestInput(**owner, documents=documents, chunking=body.chunking, options=options)
    cases = registry(state)

    async def latest(kind: RecordKind, version: str | None, made_by: str) -> CaseRecord:
        """The case's record of ``kind`` (``version``, else the newest), or 422 naming the job
        that makes it."""
        record = await asyncio.to_thread(
            cases.latest, tenant_id=principal.tenant_id, case_id=body.case_id, kind=kind, version=version
        )
        if record is None:
            detail = f"case {body.case_id!r} has no {kind}" + (f" {version}" if version else "")
            raise _Refused(422, "job.input_not_found", f"{detail} (run {made_by} first)")
        return record

    if isinstance(body, EmbedBody):
        chunks = await latest("chunks", body.chunks, "case.ingest")
        spec = embedder_spec(body.embedder, state.settings)
        return EmbedInput(**owner, chunks=chunks.pointer, embedder=spec, options=options)
    embeddings = await latest("embeddings", body.embeddings, "case.embed")
    chunks = await latest("chunks", embeddings.detail.get("chunks"), "case.ingest")
    return IndexInput(
        **owner, chunks=chunks.pointer, embeddings=embeddings.pointer, params=body.params, options=options
    )


async def _document(state: ApiState, tenant_id: str | None, position: int, doc: Any) -> DocumentRef:
    """An inline document is stored as the tenant's upload; a referenced one must be an intact
    upload of the same tenant (anything else is refused as absent, naming nothing)."""
    data = doc.inline_bytes()
    if data is not None:
        try:
            stored = await aput(state.artifacts, data, kind=upload_kind(tenant_id), media_type=doc.media_type)
        except ArtifactError as exc:
            log.warning("document %r not stored: %s", doc.name, exc)
            raise _Refused(503, "artifact.unavailable", f"could not store {doc.name!r}; retry") from exc
        return DocumentRef(name=doc.name, artifact=stored, media_type=doc.media_type)
    pointer: ArtifactPointer = doc.artifact
    try:
        owned = await asyncio.to_thread(is_own_upload, state.artifacts, pointer, tenant_id)
    except ArtifactError as exc:
        log.warning("document %r not checked: %s", doc.name, exc)
        raise _Refused(503, "artifact.unavailable", "the artifact store could not be read; retry") from exc
    if not owned:
        raise _Refused(
            422,
            "job.input_not_found",
            f"documents.{position} ({doc.name!r}): no such upload (upload it with POST /artifacts)",
        )
    return DocumentRef(name=doc.name, artifact=pointer, media_type=doc.media_type)


def _wall_clock(settings: Settings, job_type: JobType) -> float:
    return {
        "case.ingest": settings.job_wall_clock_ingest_s,
        "case.embed": settings.job_wall_clock_embed_s,
        "case.index": settings.job_wall_clock_index_s,
    }[job_type]


# --------------------------------------------------------------------------- reads and cancel

JobId = Annotated[str, Path(min_length=1, max_length=200)]


async def _visible_job(state: ApiState, principal: Principal, job_id: str) -> JobStatus:
    """The job if the caller may see it; 404 ``job.not_found`` otherwise (absent or another tenant's)."""
    try:
        job = await get_job_status(state.client, job_id, with_result=True)
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise _Refused(503, "temporal.unavailable", "the workflow service is unreachable; retry") from exc
        job = None
    except LookupError:
        job = None
    if job is None or (principal.tenant_id is not None and job.tenant_id != principal.tenant_id):
        raise _Refused(404, "job.not_found", f"no job {job_id!r}")
    return job


@router.get("/jobs", response_model=None, responses={200: {"model": JobList}})
async def jobs_list(
    request: Request,
    state: Annotated[ApiState, Depends(api_state)],
    type: Annotated[JobType | None, Query(description="only jobs of this type")] = None,
    open: Annotated[bool, Query(description="only queued or running jobs")] = False,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> JSONResponse:
    """The caller's case jobs, newest first (an unscoped operator key sees every tenant's)."""
    principal = request_principal(request)
    tenant: Any = principal.tenant_id if principal.tenant_id is not None else ANY_TENANT
    try:
        jobs = await list_jobs(
            state.client,
            job_type=type,
            open_only=open,
            limit=limit,
            tenant_id=tenant,
            queues=job_queues(state.settings),
        )
    except RPCError:
        return error_response(503, "temporal.unavailable", "the workflow service is unreachable; retry")
    return JSONResponse({"jobs": [job.model_dump(mode="json") for job in jobs]})


@router.get("/jobs/{job_id}", response_model=None, responses={200: {"model": JobView}})
async def job_show(
    job_id: JobId, request: Request, state: Annotated[ApiState, Depends(api_state)]
) -> JSONResponse:
    """One job: state, progress (percent, items), timings, error, result."""
    try:
        job = await _visible_job(state, request_principal(request), job_id)
    except _Refused as refused:
        return refused.response
    return JSONResponse(job.model_dump(mode="json"))


@router.delete("/jobs/{job_id}", status_code=202, response_model=None, responses={202: {"model": JobView}})
async def job_cancel(
    job_id: JobId, request: Request, state: Annotated[ApiState, Depends(api_state)]
) -> JSONResponse:
    """Ask a queued or running job to stop (it ends ``cancelled``); 409 ``job.finished`` if it ended."""
    try:
        job = await _visible_job(state, request_principal(request), job_id)
    except _Refused as refused:
        return refused.response
    if job.state in FINAL_STATES:
        return error_response(409, "job.finished", f"job {job_id} already ended ({job.state})")
    try:
        await cancel_job(state.client, job_id)
    except RPCError:
        return error_response(503, "temporal.unavailable", "the workflow service is unreachable; retry")
    return JSONResponse({"cancel_requested": True, "job": job.model_dump(mode="json")}, status_code=202)


@router.get("/cases/{case_id}", response_model=None, responses={200: {"model": CaseSummary}})
async def case_show(
    case_id: Annotated[str, Path(min_length=1, max_length=200)],
    request: Request,
    state: Annotated[ApiState, Depends(api_state)],
) -> JSONResponse:
    """What the case's jobs produced: the latest chunks, embeddings and index (its
    ``version`` is the ``index_version`` a ``case_query`` ref may pin), and every record."""
    tenant = request_principal(request).tenant_id
    records = await asyncio.to_thread(registry(state).records, tenant_id=tenant, case_id=case_id)
    if not records:
        return error_response(404, "case.not_found", f"no case {case_id!r} (nothing ingested yet)")
    latest: dict[str, Any] = dict.fromkeys(("chunks", "embeddings", "index"))
    for record in records:  # newest first
        if latest[record.kind] is None:
            latest[record.kind] = record.as_dict()
    return JSONResponse(
        {"case_id": case_id, "latest": latest, "records": [record.as_dict() for record in records]}
    )


@router.post("/artifacts", status_code=201, response_model=None, responses={201: {"model": ArtifactStored}})
async def upload_artifact(
    request: Request,
    state: Annotated[ApiState, Depends(api_state)],
    name: Annotated[str | None, Query(max_length=512, description="the file's name (echoed)")] = None,
) -> JSONResponse:
    """Store the raw request body (a document for ``case.ingest``) as the caller's tenant's
    upload; answers its pointer."""
    limit = state.settings.max_upload_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        return _too_large(limit)
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:
            return _too_large(limit)
    if not body:
        return error_response(422, "admission.empty_upload", "the request body is empty")
    media_type = (request.headers.get("content-type") or "").split(";", 1)[0].strip() or None
    try:
        kind = upload_kind(request_principal(request).tenant_id)
        pointer = await aput(state.artifacts, bytes(body), kind=kind, media_type=media_type)
    except ArtifactError as exc:
        log.warning("upload not stored: %s", exc)
        return error_response(503, "artifact.unavailable", "the artifact store is unreachable; retry")
    return JSONResponse(
        {
            "artifact": pointer.model_dump(mode="json", exclude_none=True),
            "name": name,
            "media_type": media_type,
        },
        status_code=201,
    )


def _too_large(limit: int) -> JSONResponse:
    return error_response(
        413, "admission.payload_too_large", f"upload exceeds {limit} bytes (TURNGATE_MAX_UPLOAD_BYTES)"
    )
