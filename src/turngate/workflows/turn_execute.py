"""The turn's execute step: the provider call of an allowed :class:`TurnDecision` and the
EXECUTION it makes (with the spend plan's fallback candidates, the tool calls admitted, the
output safety verdict applied and a fault's snapshots).

The provider call is a regular activity on the llm task queue (heartbeats, a wall-clock timeout,
retries only for retryable errors) or, with ``provider_activity=local``, a local activity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from turngate.core.events import IntentEnvelope
    from turngate.core.model_resolution import ModelResolution
    from turngate.core.payloads import ExecutionPayload
    from turngate.core.provider_errors import NON_RETRYABLE_PROVIDER_ERRORS
    from turngate.core.tools import exchange_count
    from turngate.workflows.execution_record import answered, call_failed, with_tool_calls
    from turngate.workflows.fault_snapshots import execution_snapshots
    from turngate.workflows.redaction import apply_checked_safety, apply_output_safety
    from turngate.workflows.shared import Boundary, ProviderCallInput, ProviderCallResult
    from turngate.workflows.spend import Attempt, execute_plan
    from turngate.workflows.turn_activities import call_provider
    from turngate.workflows.turn_decide import TurnDecision

#: Seconds between the provider activity's heartbeats, times five: a lost worker is noticed then.
PROVIDER_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
#: Provider attempts when no spend plan names fallback candidates (Temporal retries).
PROVIDER_ATTEMPTS = 3


@dataclass(frozen=True)
class TurnExecution:
    """The EXECUTION to record and the fault snapshots that go with it (``stored``: those the
    provider activity already stored, by name)."""

    payload: ExecutionPayload
    snapshots: dict[str, str] = field(default_factory=dict)
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)


async def execute_turn(decision: TurnDecision, envelope: IntentEnvelope, boundary: Boundary) -> TurnExecution:
    """Call the provider for an allowed turn and make its EXECUTION."""
    call = decision.call
    assert call is not None  # only a turn that proceeds is executed
    context_digest = decision.outcome.record.context_digest

    async def attempt(c: ProviderCallInput, model: ModelResolution, attempts: int) -> Attempt:
        return await _attempt(c, model, context_digest, boundary, attempts)

    if decision.plan is not None:
        answer, payload = await execute_plan(decision.plan, call, decision.model, attempt)
    else:
        answer, payload = await attempt(call, decision.model, PROVIDER_ATTEMPTS)
    return executed(decision, envelope, answer, payload)


def executed(
    decision: TurnDecision,
    envelope: IntentEnvelope,
    answer: ProviderCallResult | None,
    payload: ExecutionPayload,
) -> TurnExecution:
    """The EXECUTION of a provider call's outcome (``answer`` None: the call failed)."""
    call = decision.call
    assert call is not None
    inputs = envelope.payload.inputs
    if answer is not None:
        payload = with_tool_calls(payload, answer.tool_calls, list(decision.offered), inputs)
    resolution = decision.outcome.resolution
    prompts = decision.prompts
    if prompts is not None and resolution is not None:
        payload = payload.model_copy(update={"exchanges_count": exchange_count(resolution) + 1})
    snapshots = execution_snapshots(
        call, payload, decision.external, debug=inputs.get("debug_snapshot") is True
    )
    stored: dict[str, dict[str, Any]] = {}
    if prompts is not None:
        payload, redacted = apply_output_safety(payload, answer, prompts)
        snapshots |= redacted
        payload, stored = apply_checked_safety(payload, answer)
    return TurnExecution(payload=payload, snapshots=snapshots, stored=stored)


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


async def call_provider_activity(
    call: ProviderCallInput, boundary: Boundary, attempts: int = PROVIDER_ATTEMPTS
) -> ProviderCallResult:
    """The provider call: a regular activity on the llm queue, or (``provider_activity=local``) a
    local activity on this worker, which keeps the turn to one workflow task. Same timeout and
    retries either way; a local call has no heartbeats (its worker's liveness is the workflow
    task's)."""
    wall_clock = timedelta(seconds=boundary.llm_wall_clock_s)
    retry = RetryPolicy(
        initial_interval=timedelta(milliseconds=500),
        maximum_attempts=attempts,
        non_retryable_error_types=list(NON_RETRYABLE_PROVIDER_ERRORS),
    )
    if boundary.provider_activity == "local":
        return await workflow.execute_local_activity(
            call_provider,
            call,
            start_to_close_timeout=wall_clock,
            schedule_to_close_timeout=wall_clock,
            retry_policy=retry,
        )
    return await workflow.execute_activity(
        call_provider,
        call,
        task_queue=boundary.llm_task_queue,
        start_to_close_timeout=wall_clock,
        schedule_to_close_timeout=wall_clock,
        heartbeat_timeout=PROVIDER_HEARTBEAT_TIMEOUT,
        retry_policy=retry,
    )
