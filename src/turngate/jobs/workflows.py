"""The job workflows: ``CaseIngestWorkflow``, ``CaseEmbedWorkflow``, ``CaseIndexWorkflow``.

Each runs one heartbeating activity on its own task queue and keeps a :class:`JobProgress` that
the ``progress`` query returns (fed by the activity's ``report_progress`` signals). Endings:

- completed: returns the job's result;
- cancelled: a workflow cancel cancels the activity, waits for it to stop, and the workflow ends
  CANCELED (state ``cancelled``);
- timed_out: the activity hit the job's wall-clock limit; the workflow fails with the
  non-retryable ``ApplicationError`` type ``job.timed_out`` and a message naming the limit;
- failed: any other non-retryable activity failure, re-raised with its type.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, is_cancelled_exception
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from turngate.jobs.activity_definitions import embed, index, ingest
    from turngate.jobs.domain.models import (
        TIMED_OUT,
        EmbedInput,
        EmbedResult,
        IndexInput,
        IndexResult,
        IngestInput,
        IngestResult,
        JobOptions,
        JobProgress,
        ProgressReport,
    )

R = TypeVar("R")
# The activity enforces the wall clock itself; Temporal's start-to-close is only a backstop for
# an attempt that stops cooperating (a blocking call that never yields).
BACKSTOP_GRACE = timedelta(seconds=60)
RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10))


class _JobWorkflow:
    def __init__(self) -> None:
        self._progress = JobProgress()

    @workflow.query(name="progress")
    def progress(self) -> JobProgress:
        return self._progress

    @workflow.signal(name="report_progress")
    def report_progress(self, report: ProgressReport) -> None:
        if self._progress.state not in ("queued", "running"):
            return
        self._progress.state = "running"
        self._progress.started_at = self._progress.started_at or report.started_at
        self._progress.items_total = report.items_total
        self._progress.items_done = max(self._progress.items_done, report.items_done)

    async def _run(
        self, options: JobOptions, call: Callable[[dict[str, Any]], Awaitable[R]], done: Callable[[R], int]
    ) -> R:
        opts: dict[str, Any] = {
            "start_to_close_timeout": timedelta(seconds=options.wall_clock_s) + BACKSTOP_GRACE,
            "heartbeat_timeout": timedelta(seconds=options.heartbeat_timeout_s),
            "retry_policy": RETRY,
            "cancellation_type": ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        }
        try:
            result = await call(opts)
        except (Exception, asyncio.CancelledError) as exc:  # never BaseException: eviction passes
            self._progress.finished_at = _now()
            if is_cancelled_exception(exc):
                self._progress.state = "cancelled"
                self._record_final()
                raise  # the workflow ends CANCELED
            failure = self._failure(exc)
            self._record_final()
            raise failure from None
        self._progress.items_done = self._progress.items_total = done(result)
        self._progress.state = "completed"
        self._progress.finished_at = _now()
        self._record_final()
        return result

    def _record_final(self) -> None:
        # The memo outlives the workers: a finished job is read without a query (no replay).
        workflow.upsert_memo({"progress": self._progress.model_dump(mode="json")})

    def _failure(self, exc: BaseException) -> ApplicationError:
        cause = exc.cause if isinstance(exc, ActivityError) and exc.cause is not None else exc
        timed_out = isinstance(cause, TimeoutError) or (
            isinstance(cause, ApplicationError) and cause.type == TIMED_OUT
        )
        if timed_out:
            kind = TIMED_OUT
        elif isinstance(cause, ApplicationError) and cause.type:
            kind = cause.type
        else:
            kind = "job.failed"
        self._progress.state = "timed_out" if timed_out else "failed"
        self._progress.error = {"type": kind, "message": str(cause)}
        return ApplicationError(str(cause), self._progress.error, type=kind, non_retryable=True)


def _now() -> str:
    return workflow.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@workflow.defn(name="CaseIngestWorkflow")
class CaseIngestWorkflow(_JobWorkflow):
    @workflow.run
    async def run(self, input: IngestInput) -> IngestResult:
        return await self._run(
            input.options,
            lambda opts: workflow.execute_activity(ingest, input, **opts),
            lambda result: result.documents,
        )


@workflow.defn(name="CaseEmbedWorkflow")
class CaseEmbedWorkflow(_JobWorkflow):
    @workflow.run
    async def run(self, input: EmbedInput) -> EmbedResult:
        return await self._run(
            input.options,
            lambda opts: workflow.execute_activity(embed, input, **opts),
            lambda result: result.chunk_count,
        )


@workflow.defn(name="CaseIndexWorkflow")
class CaseIndexWorkflow(_JobWorkflow):
    @workflow.run
    async def run(self, input: IndexInput) -> IndexResult:
        return await self._run(
            input.options,
            lambda opts: workflow.execute_activity(index, input, **opts),
            lambda result: result.chunk_count,
        )


JOB_WORKFLOWS = (CaseIngestWorkflow, CaseEmbedWorkflow, CaseIndexWorkflow)
