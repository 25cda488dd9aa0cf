"""The job workflows: ``CaseIngestWorkflow``, ``CaseEmbedWorkflow``, ``CaseIndexWorkflow``.

Each runs its job as a sequence of activity *steps* on its own task queue: a step works for up
to the job's ``step_s``, then hands back its :class:`JobCheckpoint` (a cursor of bounded size),
and the workflow starts the next step with it. Before the run's history passes
``history_events_max`` events or ``history_bytes_max`` bytes (or when the server suggests it)
the workflow continues as new with the input and the checkpoint, so a job of any length keeps
small histories. After each step it updates the ``progress`` query and its current details
(what the Temporal UI shows: stage, items done of total, rate). Endings:

- completed: returns the job's result;
- cancelled: a workflow cancel cancels the step, waits for it to stop, records the error
  ``job.cancelled`` in the memo, and the workflow ends CANCELED (state ``cancelled``);
- timed_out: a step hit the job's wall-clock limit; the workflow fails with the non-retryable
  ``ApplicationError`` type ``job.timed_out`` and a message naming the limit;
- failed: any other non-retryable activity failure, re-raised with its type.

A job whose input lacks ``options.steps`` (recorded before steps existed) replays its one
whole-job activity, fed by the ``report_progress`` signals those workers sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    TimeoutError,
    WorkflowAlreadyStartedError,
    is_cancelled_exception,
)
from temporalio.workflow import ActivityCancellationType, ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from turngate.jobs.activity_definitions import (
        embed,
        embed_step,
        index,
        index_step,
        ingest,
        ingest_step,
    )
    from turngate.jobs.domain.models import (
        CANCELLED,
        TIMED_OUT,
        EmbedInput,
        EmbedResult,
        EmbedStep,
        IndexInput,
        IndexResult,
        IndexStep,
        IngestInput,
        IngestResult,
        IngestStep,
        JobCheckpoint,
        JobOptions,
        JobProgress,
        ProgressReport,
    )
    from turngate.jobs.domain.summaries import job_details, step_summary

R = TypeVar("R")
S = TypeVar("S", IngestStep, EmbedStep, IndexStep)
JobInput = IngestInput | EmbedInput | IndexInput
# The activity enforces the wall clock itself; Temporal's start-to-close is only a backstop for
# an attempt that stops cooperating (a blocking call that never yields).
BACKSTOP_GRACE = timedelta(seconds=60)
#: How often a job waiting for a slot tries again (each try is a few history events per slot).
SLOT_POLL = timedelta(seconds=5)
JOB_SLOT_WORKFLOW = "JobSlotWorkflow"
RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10))


class _JobWorkflow:
    stage = "job"
    unit = "items"

    def __init__(self) -> None:
        self._progress = JobProgress()

    @workflow.query(name="progress")
    def progress(self) -> JobProgress:
        return self._progress

    @workflow.signal(name="report_progress")
    def report_progress(self, report: ProgressReport) -> None:
        # Only workers from before steps send it (progress now comes from heartbeats and steps).
        if self._progress.state not in ("queued", "running"):
            return
        self._progress.state = "running"
        self._progress.started_at = self._progress.started_at or report.started_at
        self._progress.items_total = report.items_total
        self._progress.items_done = max(self._progress.items_done, report.items_done)

    def _options(self, options: JobOptions) -> dict[str, Any]:
        return {
            "start_to_close_timeout": timedelta(seconds=options.wall_clock_s) + BACKSTOP_GRACE,
            "heartbeat_timeout": timedelta(seconds=options.heartbeat_timeout_s),
            "retry_policy": RETRY,
            "cancellation_type": ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        }

    async def _steps(
        self,
        input: JobInput,
        run_step: Callable[[JobCheckpoint | None, dict[str, Any]], Awaitable[S]],
    ) -> Any:
        """Steps until one returns the result; continue as new when the history is full."""
        checkpoint = input.resume
        if checkpoint is not None:
            self._show(checkpoint)
        if input.options.slots:
            await self._guarded(self._take_slot(input))
        while True:
            opts = self._options(input.options) | {"summary": step_summary(self.stage, checkpoint, self.unit)}
            step = await self._guarded(run_step(checkpoint, opts))
            checkpoint = step.checkpoint
            if step.result is not None:
                self._progress.started_at = self._progress.started_at or checkpoint.started_at
                self._progress.steps = checkpoint.steps
                self._progress.items_done = self._progress.items_total = _count(step.result)
                return self._complete(step.result)
            self._show(checkpoint)
            if self._history_full(input.options):
                # memo and search attributes carry over; within a run every step gets the same
                # input (one stored payload when it is large), only the checkpoint changes
                workflow.continue_as_new(input.model_copy(update={"resume": checkpoint}))

    async def _take_slot(self, input: JobInput) -> None:
        """Wait (state ``queued``) until one of the job type's ``slots`` slot workflows can be
        started under its id; it ends when this run ends (the parent-close policy)."""
        info = workflow.info()
        slots = input.options.slots
        while True:
            for n in range(slots):
                try:
                    await workflow.start_child_workflow(
                        JOB_SLOT_WORKFLOW,
                        id=f"{info.task_queue}-slot-{n + 1}",
                        task_queue=info.task_queue,
                        parent_close_policy=ParentClosePolicy.TERMINATE,
                        static_summary=f"{self.stage} slot {n + 1} of {slots}: held by {info.workflow_id}",
                    )
                    return
                except WorkflowAlreadyStartedError:
                    continue
            if self._history_full(input.options):
                workflow.continue_as_new(input)
            await workflow.sleep(SLOT_POLL)

    async def _whole(
        self, options: JobOptions, call: Callable[[dict[str, Any]], Awaitable[R]], done: Callable[[R], int]
    ) -> R:
        """A job recorded before steps: one activity for the whole job."""
        result = await self._guarded(call(self._options(options)))
        self._progress.items_done = self._progress.items_total = done(result)
        return self._complete(result)

    async def _guarded(self, running: Awaitable[R]) -> R:
        try:
            return await running
        except (Exception, asyncio.CancelledError) as exc:  # never BaseException: eviction passes
            self._progress.finished_at = _now()
            if is_cancelled_exception(exc):
                self._progress.state = "cancelled"
                self._progress.error = {"type": CANCELLED, "message": "the job was cancelled"}
                self._record_final()
                raise  # the workflow ends CANCELED
            failure = self._failure(exc)
            self._record_final()
            raise failure from None

    def _complete(self, result: R) -> R:
        self._progress.state = "completed"
        self._progress.finished_at = _now()
        self._details()
        self._record_final()
        return result

    def _show(self, checkpoint: JobCheckpoint) -> None:
        """The progress query and the UI's current details after a step."""
        p = self._progress
        p.state = "running"
        p.started_at = p.started_at or checkpoint.started_at
        p.items_total = checkpoint.items_total
        p.items_done = max(p.items_done, checkpoint.items_done, checkpoint.cursor)
        p.steps = checkpoint.steps
        self._details()

    def _details(self) -> None:
        """The rate so far, and the UI's current details (no history event: a query answers)."""
        p = self._progress
        if p.started_at:
            elapsed = (workflow.now() - _parse(p.started_at)).total_seconds()
            p.rate_per_s = round(p.items_done / elapsed, 1) if elapsed > 0 else None
        workflow.set_current_details(job_details(self.stage, p, self.unit, run=workflow.info().run_id))

    @staticmethod
    def _history_full(options: JobOptions) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= options.history_events_max
            or info.get_current_history_size() >= options.history_bytes_max
        )

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
        counts = cause.details[0] if isinstance(cause, ApplicationError) and cause.details else None
        if isinstance(counts, dict):  # how far the step got (a wall-clock failure says)
            self._progress.items_done = max(self._progress.items_done, int(counts.get("items_done", 0)))
            self._progress.items_total = int(counts.get("items_total", self._progress.items_total))
        self._progress.error = {"type": kind, "message": str(cause)}
        return ApplicationError(str(cause), self._progress.error, type=kind, non_retryable=True)


def _count(result: IngestResult | EmbedResult | IndexResult) -> int:
    return result.documents if isinstance(result, IngestResult) else result.chunk_count


def _now() -> str:
    return workflow.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(moment: str) -> datetime:
    return datetime.fromisoformat(moment.replace("Z", "+00:00"))


@workflow.defn(name="CaseIngestWorkflow")
class CaseIngestWorkflow(_JobWorkflow):
    stage = "ingest"
    unit = "documents"

    @workflow.run
    async def run(self, input: IngestInput) -> IngestResult:
        if not input.options.steps:
            return await self._whole(
                input.options,
                lambda opts: workflow.execute_activity(ingest, input, **opts),
                lambda result: result.documents,
            )
        return await self._steps(  # type: ignore[no-any-return]
            input, lambda cp, opts: workflow.execute_activity(ingest_step, args=[input, cp], **opts)
        )


@workflow.defn(name="CaseEmbedWorkflow")
class CaseEmbedWorkflow(_JobWorkflow):
    stage = "embed"
    unit = "chunks"

    @workflow.run
    async def run(self, input: EmbedInput) -> EmbedResult:
        if not input.options.steps:
            return await self._whole(
                input.options,
                lambda opts: workflow.execute_activity(embed, input, **opts),
                lambda result: result.chunk_count,
            )
        return await self._steps(  # type: ignore[no-any-return]
            input, lambda cp, opts: workflow.execute_activity(embed_step, args=[input, cp], **opts)
        )


@workflow.defn(name="CaseIndexWorkflow")
class CaseIndexWorkflow(_JobWorkflow):
    stage = "index"
    unit = "chunks"

    @workflow.run
    async def run(self, input: IndexInput) -> IndexResult:
        if not input.options.steps:
            return await self._whole(
                input.options,
                lambda opts: workflow.execute_activity(index, input, **opts),
                lambda result: result.chunk_count,
            )
        return await self._steps(  # type: ignore[no-any-return]
            input, lambda cp, opts: workflow.execute_activity(index_step, args=[input, cp], **opts)
        )


@workflow.defn(name=JOB_SLOT_WORKFLOW)
class JobSlotWorkflow:
    """One of a job type's slots, held while its job's run lasts: it waits until the parent
    closes and terminates it (no event of its own after it started)."""

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


JOB_WORKFLOWS = (CaseIngestWorkflow, CaseEmbedWorkflow, CaseIndexWorkflow, JobSlotWorkflow)
