"""Start, read, list and cancel jobs from outside Temporal's vocabulary (for the API, tests and bench).

``get_job_status`` answers with a :class:`JobStatus`: for a running job from the workflow's
``progress`` query, for a finished one from its outcome (result or failure), so readers never see
Temporal's execution states or failure classes.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from pydantic import BaseModel
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.service import RPCError

from turngate.jobs.domain.models import (
    CANCELLED,
    FINAL_STATES,
    JOB_TYPES,
    TIMED_OUT,
    EmbedInput,
    EmbedResult,
    IndexInput,
    IndexResult,
    IngestInput,
    IngestResult,
    JobCheckpoint,
    JobProgress,
    JobState,
    JobStatus,
    JobType,
)
from turngate.jobs.domain.queues import JOB_TYPE_OF_WORKFLOW, WORKFLOW_NAMES, JobConcurrency, JobQueues
from turngate.jobs.domain.summaries import job_static_details, job_summary
from turngate.workflows.shared import SA_CASE_ID, SA_CORRELATION_ID, SA_JOB_TYPE, SA_TENANT_ID

log = logging.getLogger(__name__)

_CLOSED: dict[WorkflowExecutionStatus, JobState] = {
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "cancelled",
    WorkflowExecutionStatus.TIMED_OUT: "timed_out",
}
RESULT_TYPES: dict[JobType, type[BaseModel]] = {
    "case.ingest": IngestResult,
    "case.embed": EmbedResult,
    "case.index": IndexResult,
}
# A workflow-level cap well past the job's own wall-clock limit: only a stuck job ever hits it.
EXECUTION_CAP_FACTOR = 3


async def start_job(
    client: Client,
    job_type: JobType,
    input: IngestInput | EmbedInput | IndexInput,
    *,
    job_id: str,
    queues: JobQueues | None = None,
    id_reuse_policy: WorkflowIDReusePolicy | None = None,
    correlation_id: str | None = None,
    web_url: str | None = None,
) -> WorkflowHandle[Any, Any]:
    """Start a job workflow (an existing id returns the running job: resubmission is idempotent;
    with ``REJECT_DUPLICATE`` a finished one raises ``WorkflowAlreadyStartedError``).

    The job runs in steps (``options.steps``), and starts with what the Temporal UI shows of it:
    a one-line summary, details linking to ``web_url`` (turngate's API, when given), and the
    search attributes ``TurngateCaseId``, ``TurngateJobType``, ``TurngateCorrelationId`` and
    ``TurngateTenantId`` (all registered by the worker, or at the dev server's start)."""
    queues = queues or JobQueues()
    input = input.model_copy(update={"options": input.options.model_copy(update={"steps": True})})
    pairs: list[SearchAttributePair[str]] = [
        SearchAttributePair(SA_CASE_ID, input.case_id),
        SearchAttributePair(SA_JOB_TYPE, job_type),
    ]
    if input.tenant_id is not None:
        pairs.append(SearchAttributePair(SA_TENANT_ID, input.tenant_id))
    if correlation_id is not None:
        pairs.append(SearchAttributePair(SA_CORRELATION_ID, correlation_id))
    extra: dict[str, Any] = {}
    if id_reuse_policy is not None:
        extra["id_reuse_policy"] = id_reuse_policy
    return await client.start_workflow(
        WORKFLOW_NAMES[job_type],
        input,
        id=job_id,
        result_type=RESULT_TYPES[job_type],
        task_queue=queues.for_type(job_type),
        memo={
            "case_id": input.case_id,
            "job_type": job_type,
            "tenant_id": input.tenant_id,
            "correlation_id": correlation_id,
        },
        search_attributes=TypedSearchAttributes(pairs),
        static_summary=job_summary(job_type, input.case_id, input),
        static_details=job_static_details(
            job_id, input.case_id, correlation_id=correlation_id, tenant_id=input.tenant_id, web_url=web_url
        ),
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        execution_timeout=timedelta(seconds=input.options.wall_clock_s * EXECUTION_CAP_FACTOR + 300),
        rpc_timeout=timedelta(seconds=10),
        **extra,
    )


async def get_job_status(client: Client, job_id: str, *, with_result: bool = True) -> JobStatus:
    """The job's state, progress, timings, error and (when done) result. Raises
    :class:`~temporalio.service.RPCError` (NOT_FOUND) for an unknown id."""
    desc = await client.get_workflow_handle(job_id).describe()
    job_type = JOB_TYPE_OF_WORKFLOW.get(desc.workflow_type)
    if job_type is None:
        raise LookupError(f"{job_id} is not a job (workflow type {desc.workflow_type})")
    handle = client.get_workflow_handle(job_id, result_type=RESULT_TYPES[job_type])
    memo = await desc.memo()
    status = desc.status or WorkflowExecutionStatus.RUNNING
    if status in _CLOSED:
        final = memo.get("progress")
        progress = JobProgress.model_validate(final) if isinstance(final, dict) else None
    else:
        progress = await _with_heartbeat(client, await _query_progress(handle), desc)
    error: dict[str, Any] | None = progress.error if progress else None
    result: dict[str, Any] | None = None
    state = reported_state(status, progress.state if progress else None)
    if status in _CLOSED:
        if with_result or status == WorkflowExecutionStatus.FAILED:
            result, error = await _outcome(handle, error)
        if error and error.get("type") == TIMED_OUT:
            state = "timed_out"
    items_total = progress.items_total if progress else 0
    items_done = progress.items_done if progress else 0
    if state == "completed" and progress is None and result is not None:
        # no final progress in the memo: count from the result as the workflow does (ingest:
        # documents; embed and index: chunks), so every view shows the same numbers
        counted = result.get("documents" if job_type == "case.ingest" else "chunk_count")
        items_total = items_done = int(counted or 0)
    percent = 100.0 if state == "completed" else (progress.percent if progress else 0.0)
    return JobStatus(
        id=job_id,
        type=job_type,
        case_id=memo.get("case_id"),
        tenant_id=memo.get("tenant_id"),
        state=state,
        progress=percent,
        items_done=items_done,
        items_total=items_total,
        submitted_at=_iso(desc.start_time),
        started_at=progress.started_at if progress else None,
        finished_at=(progress.finished_at if progress else None) or _iso(desc.close_time),
        error=error,
        result=result,
    )


def reported_state(status: WorkflowExecutionStatus, progress_state: JobState | None) -> JobState:
    """The job state a reader sees: Temporal's once the run has closed, else its progress. The
    workflow marks its progress final just before it returns; until Temporal has closed the run
    its result cannot be read, so such a job is still ``running``."""
    if status in _CLOSED:
        return _CLOSED[status]
    if progress_state is None:
        return "queued"
    return "running" if progress_state in FINAL_STATES else progress_state


ANY_TENANT = object()


def jobs_query(
    *,
    job_type: JobType | None = None,
    open_only: bool = False,
    tenant_id: str | object | None = ANY_TENANT,
    queues: JobQueues | None = None,
) -> str:
    """The visibility query for jobs: of ``job_type`` (else every type), on ``queues`` (the
    deployment's own: several can share a namespace; None: any queue), open only, one tenant's
    (None: jobs submitted without a tenant; :data:`ANY_TENANT`: all)."""
    parts = []
    for t in [job_type] if job_type else list(JOB_TYPES):
        part = f"WorkflowType = '{WORKFLOW_NAMES[t]}'"
        if queues is not None:
            part += f" AND TaskQueue = {_quoted(queues.for_type(t))}"
        parts.append(f"({part})")
    query = f"({' OR '.join(parts)})"
    if open_only:
        query += " AND ExecutionStatus = 'Running'"
    if tenant_id is None:
        query += f" AND {SA_TENANT_ID.name} IS NULL"
    elif isinstance(tenant_id, str):
        query += f" AND {SA_TENANT_ID.name} = {_quoted(tenant_id)}"
    return query


async def list_jobs(
    client: Client,
    *,
    job_type: JobType | None = None,
    open_only: bool = False,
    limit: int = 100,
    tenant_id: str | object | None = ANY_TENANT,
    queues: JobQueues | None = None,
) -> list[JobStatus]:
    """Jobs newest first (see :func:`jobs_query` for the filters)."""
    query = jobs_query(job_type=job_type, open_only=open_only, tenant_id=tenant_id, queues=queues)
    out: list[JobStatus] = []
    async for execution in client.list_workflows(query, limit=limit):
        try:
            out.append(await get_job_status(client, execution.id, with_result=False))
        except (RPCError, LookupError):
            continue  # deleted between listing and reading
    return out


#: Open jobs read one by one to tell running from queued (beyond it, the rest count as queued).
RUNTIME_SAMPLE = 200


async def job_runtime(
    client: Client,
    *,
    queue_max: int,
    queues: JobQueues | None = None,
    concurrency: JobConcurrency | None = None,
) -> dict[str, Any]:
    """``/status``'s ``job_runtime`` per job type: jobs waiting for a slot (``queue_sizes``) and
    running (``active_counts``), the worker processes polling each type's queue (``workers``)
    and, with the configured ``concurrency``, the jobs of each type that can run at once
    (``effective_concurrency``: the configured value, a global limit for jobs started with
    ``slots``, while at least one worker polls; 0 with none). Open jobs are counted by one
    visibility count per type; the split reads the newest :data:`RUNTIME_SAMPLE` open jobs (the
    running ones are among them: concurrency is small)."""
    open_counts = {t: await count_open_jobs(client, t, queues=queues) for t in JOB_TYPES}
    active_counts = dict.fromkeys(JOB_TYPES, 0)
    if any(open_counts.values()):
        for job in await list_jobs(client, open_only=True, limit=RUNTIME_SAMPLE, queues=queues):
            if job.state == "running":
                active_counts[job.type] += 1
    queue_sizes = {t: max(open_counts[t] - active_counts[t], 0) for t in JOB_TYPES}
    runtime: dict[str, Any] = {
        "queue_sizes": queue_sizes,
        "active_counts": active_counts,
        "queue_max": queue_max,
    }
    if concurrency is not None:
        workers = await job_workers_polling(client, queues=queues)
        runtime["workers"] = workers
        runtime["effective_concurrency"] = {
            t: concurrency.for_type(t) if workers[t] else 0 for t in JOB_TYPES
        }
    return runtime


async def job_workers_polling(client: Client, *, queues: JobQueues | None = None) -> dict[JobType, int]:
    """Worker processes (distinct identities) polling each job type's activity queue lately:
    each runs up to its ``TURNGATE_JOB_CONCURRENCY_*`` jobs of the type at once."""
    queues = queues or JobQueues()
    out: dict[JobType, int] = {}
    for job_type in JOB_TYPES:
        described = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=queues.for_type(job_type)),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
            ),
            timeout=timedelta(seconds=5),
        )
        out[job_type] = len({poller.identity for poller in described.pollers})
    return out


async def count_open_jobs(client: Client, job_type: JobType, *, queues: JobQueues | None = None) -> int:
    """Open jobs of one type (queued + running): what ``TURNGATE_JOB_QUEUE_MAX`` is checked against."""
    query = jobs_query(job_type=job_type, open_only=True, queues=queues)
    return (await client.count_workflows(query)).count


async def cancel_job(client: Client, job_id: str) -> None:
    """Request cancellation; the job's activity stops at its next heartbeat, state ``cancelled``."""
    await client.get_workflow_handle(job_id).cancel()


async def _with_heartbeat(
    client: Client, progress: JobProgress | None, desc: WorkflowExecutionDescription
) -> JobProgress | None:
    """The workflow's progress (as of its last step) brought up to date by the running step's
    newest heartbeat, which carries the job's checkpoint (no signal, no history event)."""
    for pending in desc.raw_description.pending_activities:
        details = pending.heartbeat_details.payloads
        if not details:
            continue
        try:
            [value] = await client.data_converter.decode(details[:1], [JobCheckpoint])
        except Exception:  # an undecodable payload (a foreign key, an old shape): the query's view stands
            continue
        checkpoint = cast(JobCheckpoint, value)
        base = progress or JobProgress()
        if base.state in ("queued", "running"):
            return base.model_copy(
                update={
                    "state": "running",
                    "started_at": base.started_at or checkpoint.started_at,
                    "items_total": checkpoint.items_total or base.items_total,
                    "items_done": max(base.items_done, checkpoint.items_done, checkpoint.cursor),
                }
            )
    return progress


async def _query_progress(handle: WorkflowHandle[Any, Any]) -> JobProgress | None:
    try:
        # A query by name is typed Any; result_type makes the converter build a JobProgress.
        progress = await handle.query("progress", result_type=JobProgress, rpc_timeout=timedelta(seconds=3))
        return cast(JobProgress | None, progress)
    except Exception:  # no worker answers right now: the job is reported as queued
        return None


async def _outcome(
    handle: WorkflowHandle[Any, Any], error: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    try:
        # A loaded server can take seconds to answer; a result that cannot be read is logged,
        # never silently shown as a completed job without one.
        value = await handle.result(rpc_timeout=timedelta(seconds=15))
    except WorkflowFailureError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError):
            return None, {"type": cause.type or "job.failed", "message": cause.message}
        if isinstance(cause, CancelledError):
            return None, {"type": CANCELLED, "message": "the job was cancelled"}
        return None, error or {"type": "job.failed", "message": str(cause)}
    except Exception as exc:
        log.warning("job %s: its outcome could not be read: %s", handle.id, exc)
        return None, error
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json"), None
    return (value if isinstance(value, dict) else None), None


def _quoted(value: str) -> str:
    """A visibility-query string literal (quotes and backslashes escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
