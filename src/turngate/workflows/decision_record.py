"""What a turn's DECISION records besides the policy's answer, built in the workflow: the pinned
prompt, the tools offered, a DENY for a malformed client context, and the request as far as it
was built for a denied turn's fault snapshot. Pure functions of workflow data."""

from __future__ import annotations

from typing import Any

from turngate.core.client_context import (
    REASON_INVALID_CLIENT_CONTEXT,
    ClientContext,
    InvalidClientContext,
    client_context_of,
)
from turngate.core.decision import DecisionOutcome
from turngate.core.events import Event, IntentEnvelope
from turngate.core.model_resolution import ModelResolution
from turngate.core.payloads import PromptRecord
from turngate.core.system_prompt import SystemPrompt
from turngate.workflows.shared import BeginTurnResult, ProviderCallInput


def client_context_or_deny(
    inputs: dict[str, Any], outcome: DecisionOutcome
) -> tuple[ClientContext | None, DecisionOutcome]:
    """The intent's client-supplied messages and tools; a malformed one DENIES the turn."""
    try:
        return client_context_of(inputs), outcome
    except InvalidClientContext as exc:
        if not outcome.allowed:
            return None, outcome
        error = {"code": REASON_INVALID_CLIENT_CONTEXT, "detail": str(exc)}
        return None, outcome.denied(REASON_INVALID_CLIENT_CONTEXT, error)


def prompt_record(system: SystemPrompt | None, begin: BeginTurnResult) -> PromptRecord | None:
    """What the DECISION records of the pinned prompt (None without a prompt pack)."""
    if system is None or begin.prompt is None:
        return None
    snapshot = begin.prompt.snapshot
    return PromptRecord(
        snapshot_digest=snapshot.snapshot_digest,
        profile_digest=system.profile_digest,
        system_prompt_sha256=system.text_sha256,
        task_id=snapshot.task_id,
        provider=snapshot.provider,
        profile=system.profile,
        done_event=system.done_event,
        snapshot_artifact=begin.prompt.snapshot_artifact,
        pinned_by_index=begin.prompt.pinned_by_index,
        redaction_context=begin.prompt.redaction_reason,
        redaction_source=begin.prompt.redaction_source,
        layers=[layer.model_dump(mode="json") for layer in system.layers],
        skipped_layers=[layer.model_dump(mode="json") for layer in system.skipped],
    )


def with_tools_offered(outcome: DecisionOutcome, names: list[str]) -> DecisionOutcome:
    """The DECISION's prompt record lists the tools offered this turn."""
    plan = outcome.record.plan
    if plan is None or plan.prompt is None:
        return outcome
    prompt = plan.prompt.model_copy(update={"tools_offered": names})
    record = outcome.record.model_copy(update={"plan": plan.model_copy(update={"prompt": prompt})})
    return outcome.recording(record)


def message_artifact(envelope: IntentEnvelope) -> dict[str, Any] | None:
    """The pointer to the full user message, when ingress offloaded it (over the inline limit)."""
    extra = envelope.payload.payload.model_extra
    return extra.get("message_artifact") if extra else None


def request_so_far(
    envelope: IntentEnvelope, intent: Event, model: ModelResolution, system: SystemPrompt | None
) -> ProviderCallInput:
    """A denied turn's provider request as far as it was built: system prompt and user message."""
    messages = [{"role": "system", "content": system.text}] if system is not None and system.text else []
    messages.append({"role": "user", "content": envelope.message})
    return ProviderCallInput(
        correlation_id=intent.correlation_id,
        provider=model.provider or "",
        model=model.resolved_model_id or "",
        messages=messages,
        message_artifact=message_artifact(envelope),
    )
