"""Start, read, list and cancel jobs from outside Temporal's vocabulary (for the API and CLI).

``get_job_status`` answers with a :class:`JobStatus`: for a running job from the workflow's
``progress`` query, for a finished one from its outcome (result or failure), so readers never see
Temporal's execution states or failure classes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from turngate.jobs.models import (
    JOB_TYPES,
    EmbedInput,
    EmbedResult,
    IndexInput,
    IndexResult,
    IngestInput,
    IngestResult,
    JobProgress,
    JobState,
    JobStatus,
    JobType,
)
from turngate.jobs.queues import JOB_TYPE_OF_WORKFLOW, WORKFLOW_NAMES, JobQueues

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
) -> WorkflowHandle[Any, Any]:
    """Start a job workflow (an existing id returns the running job: resubmission is idempotent)."""
    queues = queues or JobQueues()
    return await client.start_workflow(
        WORKFLOW_NAMES[job_type],
        input,
        id=job_id,
        result_type=RESULT_TYPES[job_type],
        task_queue=queues.for_type(job_type),
        memo={"case_id": input.case_id, "job_type": job_type},
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        execution_timeout=timedelta(seconds=input.options.wall_clock_s * EXECUTION_CAP_FACTOR + 300),
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
        progress = await _query_progress(handle)
    error: dict[str, Any] | None = progress.error if progress else None
    result: dict[str, Any] | None = None
    state: JobState = progress.state if progress else "queued"
    if status in _CLOSED:
        state = _CLOSED[status]
        if with_result or status == WorkflowExecutionStatus.FAILED:
            result, error = await _outcome(handle, error)
        if error and error.get("type") == "job.timed_out":
            state = "timed_out"
    items_total = progress.items_total if progress else 0
    items_done = progress.items_done if progress else 0
    if state == "completed" and result is not None:
        items_total = items_done = int(result.get("chunk_count") or result.get("documents") or items_total)
    percent = 100.0 if state == "completed" else (progress.percent if progress else 0.0)
    return JobStatus(
        id=job_id,
        type=job_type,
        case_id=memo.get("case_id"),
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


async def list_jobs(
    client: Client, *, job_type: JobType | None = None, open_only: bool = False, limit: int = 100
) -> list[JobStatus]:
    """Jobs newest first (visibility query over the job workflow types)."""
    types = [job_type] if job_type else list(JOB_TYPES)
    query = " OR ".join(f"WorkflowType = '{WORKFLOW_NAMES[t]}'" for t in types)
    query = f"({query})"
    if open_only:
        query += " AND ExecutionStatus = 'Running'"
    out: list[JobStatus] = []
    async for execution in client.list_workflows(query, limit=limit):
        try:
            out.append(await get_job_status(client, execution.id, with_result=False))
        except (RPCError, LookupError):
            continue  # deleted between listing and reading
    return out


async def job_runtime(client: Client, *, queue_max: int) -> dict[str, Any]:
    """``/status``'s ``job_runtime``: per job type, jobs waiting for a slot and jobs running."""
    queue_sizes = dict.fromkeys(JOB_TYPES, 0)
    active_counts = dict.fromkeys(JOB_TYPES, 0)
    for job in await list_jobs(client, open_only=True, limit=10 * queue_max):
        if job.state == "running":
            active_counts[job.type] += 1
        else:
            queue_sizes[job.type] += 1
    return {"queue_sizes": queue_sizes, "active_counts": active_counts, "queue_max": queue_max}


async def count_open_jobs(client: Client, job_type: JobType) -> int:
    """Open jobs of one type (queued + running): what ``TURNGATE_JOB_QUEUE_MAX`` is checked against."""
    query = f"WorkflowType = '{WORKFLOW_NAMES[job_type]}' AND ExecutionStatus = 'Running'"
    return (await client.count_workflows(query)).count


async def cancel_job(client: Client, job_id: str) -> None:
    """Request cancellation; the job's activity stops at its next heartbeat, state ``cancelled``."""
    await client.get_workflow_handle(job_id).cancel()


async def _query_progress(handle: WorkflowHandle[Any, Any]) -> JobProgress | None:
    try:
        return await handle.query("progress", result_type=JobProgress, rpc_timeout=timedelta(seconds=3))
    except Exception:  # no worker answers right now: the job is reported as queued
        return None


async def _outcome(
    handle: WorkflowHandle[Any, Any], error: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    try:
        value = await handle.result(rpc_timeout=timedelta(seconds=5))
    except WorkflowFailureError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError):
            return None, {"type": cause.type or "job.failed", "message": cause.message}
        return None, error or {"type": "job.failed", "message": str(cause)}
    except Exception:
        return None, error
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json"), None
    return (value if isinstance(value, dict) else None), None


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
