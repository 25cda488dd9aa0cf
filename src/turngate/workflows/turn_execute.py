"""The turn's execute step: the provider call of an allowed :class:`TurnDecision` and the
EXECUTION it makes (with the spend plan's fallback candidates, the tool calls admitted, the
output safety verdict applied and a fault's snapshots).

Shape 1 calls the provider (``turngate.call_provider``) and the workflow records the EXECUTION.
Shape 2 (docs/WORKFLOW.md) hands the DECISION, the call and how to record its outcome to one
activity, ``turngate.call_and_record``, which appends both events itself. Either is a regular
activity on the llm task queue (heartbeats, a wall-clock limit, retries only for retryable
errors) or, with ``provider_activity=local``, a local activity.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from turngate.core.events import IntentEnvelope
    from turngate.core.model_resolution import ModelResolution
    from turngate.core.provider_errors import NON_RETRYABLE_PROVIDER_ERRORS
    from turngate.core.tools import exchange_count
    from turngate.workflows.activity_summaries import provider_summary
    from turngate.workflows.execution_record import TurnExecution, answered, call_failed, executed
    from turngate.workflows.patches import (
        EXCHANGES_COUNT_ALWAYS,
        TURN_SHAPE_COUNTED_STEP,
        TURN_SHAPE_OUTPUT_FAULTS,
        TURN_SHAPE_SNAPSHOT_STEP,
    )
    from turngate.workflows.redaction import output_safety_rules
    from turngate.workflows.shared import (
        AppendInput,
        Boundary,
        CallAndRecordInput,
        CallAndRecordResult,
        ExecutionContext,
        ProviderCallInput,
        ProviderCallResult,
    )
    from turngate.workflows.spend import Attempt, execute_plan
    from turngate.workflows.turn_activities import call_and_record, call_provider
    from turngate.workflows.turn_decide import TurnDecision

StepInput = TypeVar("StepInput")
StepResult = TypeVar("StepResult")

__all__ = ["TurnExecution", "call_and_record_activity", "execute_turn", "execution_context"]

#: Seconds between the provider activity's heartbeats, times five: a lost worker is noticed then.
PROVIDER_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
#: Provider attempts when no spend plan names fallback candidates (Temporal retries).
PROVIDER_ATTEMPTS = 3
PROVIDER_RETRY_INTERVAL = timedelta(milliseconds=500)


def execution_context(
    decision: TurnDecision,
    envelope: IntentEnvelope,
    *,
    count_every_turn: bool,
    sample_n: int = 0,
    output_faults: bool = False,
) -> ExecutionContext:
    """How the EXECUTION of this decision's provider call is made. ``count_every_turn``: the
    EXECUTION records ``exchanges_count`` without a prompt pack too (a turn with one always
    does). ``sample_n``: the boundary's 1-in-N sampling of successful turns; ``output_faults``:
    schema failures of the answer and of tool calls are faults (shape 8)."""
    resolution = decision.outcome.resolution
    pack = decision.prompts is not None
    counted = resolution is not None and (pack or count_every_turn)
    return ExecutionContext(
        model=decision.model,
        context_digest=decision.outcome.record.context_digest,
        offered=decision.offered,
        inputs=envelope.payload.inputs,
        prompt_pack=pack,
        output_safety=output_safety_rules(decision.prompts) if pack else None,
        exchanges_count=exchange_count(resolution) + 1 if counted and resolution is not None else None,
        external=decision.external,
        snapshot_sample_n=sample_n,
        output_faults=output_faults,
    )


async def execute_turn(decision: TurnDecision, envelope: IntentEnvelope, boundary: Boundary) -> TurnExecution:
    """Call the provider for an allowed turn and make its EXECUTION (shape 1)."""
    call = decision.call
    assert call is not None  # only a turn that proceeds is executed
    digest = decision.outcome.record.context_digest

    async def attempt(c: ProviderCallInput, model: ModelResolution, attempts: int) -> Attempt:
        return await _attempt(c, model, digest, boundary, attempts)

    if decision.plan is not None:
        answer, payload = await execute_plan(decision.plan, call, decision.model, attempt)
    else:
        answer, payload = await attempt(call, decision.model, PROVIDER_ATTEMPTS)
    # Asked after the call, where turns recorded since the patch asked it.
    every_turn = decision.prompts is None and workflow.patched(EXCHANGES_COUNT_ALWAYS)
    context = execution_context(
        decision,
        envelope,
        count_every_turn=every_turn,
        sample_n=boundary.snapshot_sample_n,
        output_faults=boundary.turn_shape >= TURN_SHAPE_OUTPUT_FAULTS,
    )
    return executed(context, call, answer, payload)


def failed_execution(
    decision: TurnDecision, envelope: IntentEnvelope, boundary: Boundary, exc: ActivityError | TimeoutError
) -> TurnExecution:
    """The EXECUTION of a turn whose provider step (shape 2 and later) failed as a whole."""
    call = decision.call
    assert call is not None
    context = execution_context(
        decision,
        envelope,
        count_every_turn=_counts_every_turn(boundary),
        sample_n=boundary.snapshot_sample_n,
        output_faults=boundary.turn_shape >= TURN_SHAPE_OUTPUT_FAULTS,
    )
    return executed(context, call, None, call_failed(decision.model, context.context_digest, exc))


async def _attempt(
    call: ProviderCallInput,
    model: ModelResolution,
    context_digest: str | None,
    boundary: Boundary,
    attempts: int,
) -> Attempt:
    """The provider's answer (None when the call failed) and the EXECUTION it makes."""
    try:
        answer = await call_provider_activity(call, boundary, attempts)
    except (ActivityError, TimeoutError) as exc:
        return None, call_failed(model, context_digest, exc)
    return answer, answered(model, context_digest, answer)


def _counts_every_turn(boundary: Boundary) -> bool:
    return boundary.turn_shape >= TURN_SHAPE_COUNTED_STEP


def _retry(attempts: int, *extra: str) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=PROVIDER_RETRY_INTERVAL,
        maximum_attempts=attempts,
        non_retryable_error_types=[*NON_RETRYABLE_PROVIDER_ERRORS, *extra],
    )


async def call_provider_activity(
    call: ProviderCallInput, boundary: Boundary, attempts: int = PROVIDER_ATTEMPTS
) -> ProviderCallResult:
    """The provider call: a regular activity on the llm queue, or (``provider_activity=local``) a
    local activity on this worker, which keeps the turn to one workflow task. Same timeout and
    retries either way; a local call has no heartbeats (its worker's liveness is the workflow
    task's)."""
    wall_clock = timedelta(seconds=boundary.llm_wall_clock_s)
    return await _provider_step(call_provider, call, boundary, wall_clock, _retry(attempts))


async def call_and_record_activity(
    decision: TurnDecision,
    envelope: IntentEnvelope,
    boundary: Boundary,
    record: AppendInput,
    manifest: dict[str, Any],
    step_timeout: timedelta,
) -> CallAndRecordResult:
    """Shape 2: one activity appends the DECISION (``record``), calls the provider and appends
    the EXECUTION. The provider call keeps its wall clock inside the activity (``llm.timeout``
    past it); the activity's own limit adds the two ledger steps (``step_timeout`` each)."""
    call = decision.call
    assert call is not None
    inp = CallAndRecordInput(
        decision=record,
        call=call,
        execution=execution_context(
            decision,
            envelope,
            count_every_turn=_counts_every_turn(boundary),
            sample_n=boundary.snapshot_sample_n,
            output_faults=boundary.turn_shape >= TURN_SHAPE_OUTPUT_FAULTS,
        ),
        manifest=manifest,
        attempts=PROVIDER_ATTEMPTS,
        wall_clock_s=boundary.llm_wall_clock_s,
        defer_fault_snapshots=boundary.turn_shape >= TURN_SHAPE_SNAPSHOT_STEP,
    )
    limit = timedelta(seconds=boundary.llm_wall_clock_s) + 2 * step_timeout
    retry = _retry(PROVIDER_ATTEMPTS, "ledger.conflict")
    return await _provider_step(call_and_record, inp, boundary, limit, retry)


async def _provider_step(
    activity: Callable[[StepInput], Awaitable[StepResult]],
    inp: StepInput,
    boundary: Boundary,
    limit: timedelta,
    retry: RetryPolicy,
) -> StepResult:
    """A step that calls the provider: a regular activity on the llm queue (heartbeats), or
    (``provider_activity=local``) a local activity on this worker, which keeps the turn to one
    workflow task. Same limit and retries either way."""
    if boundary.provider_activity == "local":
        return await workflow.execute_local_activity(
            activity,
            inp,
            start_to_close_timeout=limit,
            schedule_to_close_timeout=limit,
            retry_policy=retry,
            summary=provider_summary(inp),
        )
    return await workflow.execute_activity(
        activity,
        inp,
        task_queue=boundary.llm_task_queue,
        start_to_close_timeout=limit,
        schedule_to_close_timeout=limit,
        heartbeat_timeout=PROVIDER_HEARTBEAT_TIMEOUT,
        retry_policy=retry,
        summary=provider_summary(inp),
    )
