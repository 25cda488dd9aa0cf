"""The EXECUTION record of a turn: the provider's answer or its error, and the tool calls the
workflow admitted of it. Pure functions of workflow data (deterministic, no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType

from turngate.core.model_resolution import ModelResolution
from turngate.core.payloads import ExecutionPayload
from turngate.core.refs import Resolution
from turngate.core.tools import (
    ToolSpec,
    admit_tool_calls,
    exchange_count,
    first_transition,
    next_phase_for,
)
from turngate.workflows.shared import ProviderCallResult

#: workflow.patched id: every executed turn records ``exchanges_count`` (before it, only turns
#: with a system prompt from a prompt pack did).
PATCH_EXCHANGES_ALWAYS = "exchanges-count-always"


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
    model: ModelResolution, context_digest: str | None, exc: ActivityError | TimeoutError
) -> ExecutionPayload:
    """The EXECUTION of a call that failed: no text, the structured error."""
    return _started(model, context_digest, output_text="", error=execution_error(exc, model.provider))


def execution_error(exc: ActivityError | TimeoutError, provider: str | None) -> dict[str, Any]:
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


def with_exchanges_count(
    payload: ExecutionPayload, resolution: Resolution | None, prompted: bool
) -> ExecutionPayload:
    """The EXECUTION with ``exchanges_count``: the completed exchanges the turn referenced, plus
    this one (the turn stream's ``done`` event reports it). ``prompted``: the turn had a system
    prompt from a prompt pack, which always counted; other turns count since the patch, so
    histories recorded before it replay as they ran."""
    if resolution is None or not (prompted or workflow.patched(PATCH_EXCHANGES_ALWAYS)):
        return payload
    return payload.model_copy(update={"exchanges_count": exchange_count(resolution) + 1})
