"""The EXECUTION record of a turn: the provider's answer or its error, the tool calls admitted
of it, the output safety verdict applied, and a fault's snapshots. Pure functions of workflow
data (deterministic, no I/O): the workflow and the provider step that records its own EXECUTION
make the same record from the same outcome."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType

from turngate.core.client_context import recorded_request_options
from turngate.core.model_resolution import ModelResolution
from turngate.core.payloads import ExecutionPayload
from turngate.core.request_options import check_output
from turngate.core.safety import SafetyRules
from turngate.core.sampling import sampled
from turngate.core.tools import ToolSpec, admit_tool_calls, first_transition, next_phase_for
from turngate.workflows.fault_snapshots import execution_snapshots
from turngate.workflows.redaction import apply_checked_safety, apply_output_safety
from turngate.workflows.shared import ExecutionContext, ProviderCallInput, ProviderCallResult


@dataclass(frozen=True)
class TurnExecution:
    """The EXECUTION to record and the fault snapshots that go with it (``stored``: those the
    provider activity already stored, by name)."""

    payload: ExecutionPayload
    snapshots: dict[str, str] = field(default_factory=dict)
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)


def executed(
    context: ExecutionContext,
    call: ProviderCallInput,
    answer: ProviderCallResult | None,
    payload: ExecutionPayload,
) -> TurnExecution:
    """The EXECUTION of a provider call's outcome (``answer`` None: the call failed, ``payload``
    says how)."""
    if answer is not None:
        payload = with_tool_calls(payload, answer.tool_calls, list(context.offered), context.inputs)
        payload = with_output_check(payload, answer, context.inputs)
    if context.exchanges_count is not None:
        payload = payload.model_copy(update={"exchanges_count": context.exchanges_count})
    debug = context.inputs.get("debug_snapshot") is True
    sample = sampled(call.correlation_id, context.snapshot_sample_n)
    snapshots = execution_snapshots(
        call, payload, context.external, debug=debug, sampled=sample, output_faults=context.output_faults
    )
    stored: dict[str, dict[str, Any]] = {}
    if context.prompt_pack:
        rules = context.output_safety if context.output_safety is not None else SafetyRules()
        payload, redacted = apply_output_safety(payload, answer, rules)
        snapshots |= redacted
        payload, stored = apply_checked_safety(payload, answer)
    return TurnExecution(payload=payload, snapshots=snapshots, stored=stored)


def _started(model: ModelResolution, context_digest: str | None, **fields: Any) -> ExecutionPayload:
    return ExecutionPayload(
        provider=model.provider,
        model_id=model.resolved_model_id,
        requested_model_id=model.requested_model_id,
        resolved_model_id=model.resolved_model_id,
        context_digest=context_digest,
        **fields,
    )


def answered(
    model: ModelResolution, context_digest: str | None, answer: ProviderCallResult
) -> ExecutionPayload:
    """The EXECUTION of a call that answered (tool calls are admitted by :func:`with_tool_calls`)."""
    offloaded = answer.output_artifact is not None
    return _started(
        model,
        context_digest,
        output_text=answer.output_text,
        usage=answer.usage,
        # The full answer is over the inline limit: it lives in the artifact store.
        output_artifact=answer.output_artifact,
        output_truncated=answer.output_truncated if offloaded else None,
        obs={"duration_ms": answer.duration_ms},
    )


def call_failed(
    model: ModelResolution, context_digest: str | None, exc: ActivityError | TimeoutError | ApplicationError
) -> ExecutionPayload:
    """The EXECUTION of a call that failed: no text, the structured error."""
    return _started(model, context_digest, output_text="", error=execution_error(exc, model.provider))


def execution_error(
    exc: ActivityError | TimeoutError | ApplicationError, provider: str | None
) -> dict[str, Any]:
    """The structured, secret-free error an EXECUTION records. A local activity's timeout
    arrives wrapped in ActivityError when it happens and as a bare TimeoutError when replayed
    from its marker: both are the same outcome."""
    cause = exc.cause if isinstance(exc, ActivityError) else exc
    if isinstance(cause, TimeoutError) and cause.type in (
        TimeoutType.START_TO_CLOSE,
        TimeoutType.SCHEDULE_TO_CLOSE,
        TimeoutType.HEARTBEAT,
    ):
        return {
            "provider": provider,
            "status_code": None,
            "code": "llm.timeout",
            "message": f"the provider call exceeded its wall-clock limit ({cause.type.name})",
        }
    if isinstance(cause, ApplicationError):
        details = cause.details[0] if cause.details else {}
        return {
            "provider": provider,
            "status_code": details.get("status_code") if isinstance(details, dict) else None,
            "code": cause.type or "provider.error",
            "message": cause.message,
        }
    return {"provider": provider, "status_code": None, "code": "provider.error", "message": str(exc)}


def with_output_check(
    payload: ExecutionPayload, answer: ProviderCallResult, inputs: Mapping[str, Any]
) -> ExecutionPayload:
    """The answer checked against the JSON the client asked for (``response_format``): only when
    it asked, and the whole answer is inline (an offloaded answer is not read back here)."""
    options = recorded_request_options(inputs)
    if options is None or options.response_format is None or answer.output_artifact is not None:
        return payload
    if answer.tool_calls and not answer.output_text:
        return payload  # the model called a tool instead of answering: nothing to check
    check = check_output(answer.output_text, options.response_format)
    return payload if check is None else payload.model_copy(update={"output_check": check.recorded()})


def with_tool_calls(
    payload: ExecutionPayload,
    calls: list[dict[str, Any]],
    offered: list[ToolSpec],
    inputs: Mapping[str, Any],
) -> ExecutionPayload:
    """Only calls to tools offered this turn, with valid arguments, are recorded as admitted (and
    so forwarded); a transition signal maps to the next phase the intent's inputs configure, at
    the path the tool spec names."""
    if not calls:
        return payload
    admission = admit_tool_calls(calls, offered)
    update: dict[str, Any] = {"tool_calls": [call.model_dump(mode="json") for call in admission.admitted]}
    if admission.rejected:
        update["tool_calls_rejected"] = [call.model_dump(mode="json") for call in admission.rejected]
    hit = first_transition(admission, offered)
    if hit is not None:
        call, transition = hit
        update["phase_transition"] = transition
        update["next_phase"] = next_phase_for(call, transition, offered, inputs)
    return payload.model_copy(update=update)
