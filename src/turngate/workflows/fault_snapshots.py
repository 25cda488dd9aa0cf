"""Which faults of a turn step get snapshots, and what the workflow hands the ledger step for
them (context observability's fault triggers, as far as a turn has them).

A fault is a provider error or timeout, a Workbench fetch that failed (error, timeout, no
connection), a pointer that could not be resolved (a missing prompt snapshot or message
artifact), a failed external-ref resolution, a DENY because the policy or the prompt builder
raised (``policy.evaluation_error``, ``prompt.builder_error``) or the loop guard stopped a tool
loop (``loop_guard.repeated_tool_call``), or an explicit
``inputs.debug_snapshot``. On a fault the step stores:

- ``prompt_snapshot``: the exact provider request (model, every message with the offloaded
  user message in full, max_tokens, the tool definitions). The workflow passes the
  :class:`ProviderCallInput` (small: the large message is a pointer); the ledger step turns it
  into the request, reading the message back, with the same function the provider call uses.
- ``provider_output_snapshot`` (EXECUTION): the raw outcome of the call and the triggers.
- ``tool_output_snapshot``: the raw external-ref outcomes (reason codes, details, pointers).

Pure functions of workflow data: deterministic, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from turngate.core.canonical import canonical_bytes
from turngate.core.external import ExternalContext
from turngate.core.loop_guard import LOOP_GUARD
from turngate.core.payloads import DecisionPayload, ExecutionPayload
from turngate.workflows.shared import ProviderCallInput

#: Workbench refusals that are failures of the fetch itself (not refusals by configuration).
FETCH_FAULT_CODES = frozenset({"workbench.timeout", "workbench.connection", "workbench.http_error"})
#: DENY reasons that are faults, not decisions: the policy or the prompt builder raised, or the
#: loop guard stopped a tool loop (its snapshot is the whole request it stopped).
FAULT_DENY_CODES = frozenset({"policy.evaluation_error", "prompt.builder_error", LOOP_GUARD})
PROMPT_SNAPSHOT = "prompt_snapshot"


def _canonical(value: Any) -> str:
    return canonical_bytes(value).decode()


def _fetch_faults(external: ExternalContext | None) -> list[dict[str, Any]]:
    return [r for r in (external.records if external else ()) if r.get("reason_code") in FETCH_FAULT_CODES]


def _tool_outputs(external: ExternalContext | None) -> dict[str, str]:
    if external is None or not (external.records or external.error):
        return {}
    raw = {
        "external_refs": list(external.records),
        "error": external.error.model_dump(mode="json") if external.error else None,
    }
    return {"tool_output_snapshot": _canonical(raw)}


def execution_snapshots(
    call: ProviderCallInput,
    payload: ExecutionPayload,
    external: ExternalContext | None,
    *,
    debug: bool,
    sampled: bool = False,
    output_faults: bool = False,
) -> dict[str, str]:
    """The EXECUTION step's snapshots ({} when nothing went wrong and none was asked for).
    ``sampled``: the turn is in the 1-in-N sample (core/sampling.py); a successful one is
    snapshotted as a fault would be, trigger ``sampled``. ``output_faults`` (shape 8): an answer
    that fails the client's JSON schema (``schema_validation_failed``: the gateway repairs
    nothing, so the first failed validation is final) and tool calls whose arguments fail their
    tool's schema (``tool_call_rejected``) are faults too."""
    triggers = []
    if payload.error:
        triggers.append("provider_error")
    if output_faults and payload.output_check is not None and not payload.output_check.get("valid", True):
        triggers.append("schema_validation_failed")
    if output_faults and payload.tool_calls_rejected:
        triggers.append("tool_call_rejected")
    if _fetch_faults(external):
        triggers.append("fetch_error")
    if debug:
        triggers.append("debug_request")
    if sampled and not triggers:
        triggers.append("sampled")
    if not triggers:
        return {}
    outcome = {
        "fault_triggers": triggers,
        "error": payload.error,
        "output_text": payload.output_text,
    }
    return {
        PROMPT_SNAPSHOT: _canonical(call.model_dump(mode="json")),
        "provider_output_snapshot": _canonical(outcome),
    } | _tool_outputs(external)


def decision_snapshots(
    request_so_far: Callable[[], ProviderCallInput],
    record: DecisionPayload,
    external: ExternalContext | None,
) -> dict[str, str]:
    """A DENY's snapshots when the denial is a fault: a pointer that could not be resolved, a
    failed external-ref resolution, a failed fetch, or a policy or prompt builder that raised.
    The prompt is the request as far as it was built (system prompt, if any, and the user
    message)."""
    if record.allowed:
        return {}  # an allowed turn's faults are snapshotted with its EXECUTION
    error = record.error or {}
    faulty = (
        bool(error.get("missing_pointers"))
        or (external is not None and external.error is not None)
        or not FAULT_DENY_CODES.isdisjoint(record.reason_codes)
    )
    if not faulty and not _fetch_faults(external):
        return {}
    return {PROMPT_SNAPSHOT: _canonical(request_so_far().model_dump(mode="json"))} | _tool_outputs(external)
