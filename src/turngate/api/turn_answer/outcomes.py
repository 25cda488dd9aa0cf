"""What a recorded outcome means in HTTP terms, on every OpenAI- or Anthropic-shaped front door:
the status of a failed EXECUTION's error code, the headers of an answer that is a recorded
outcome, and which refused tool calls the client must hear of (docs/OPENAI.md, "Errors")."""

from __future__ import annotations

from typing import Any

from turngate.api.openai_compat.wire import ChatCompletionRequest
from turngate.core.events import Event

#: Provider error codes answered 429 / 503 (with Retry-After); the vendor's other refusals keep
#: their 4xx status; anything else is our own fault, a 500 (docs/OPENAI.md, "Errors").
RATE_LIMITED = frozenset({"provider.rate_limited"})
UNAVAILABLE = frozenset(
    {
        "llm.timeout",
        "provider.timeout",
        "provider.overloaded",
        "provider.connection",
        "SYSTEM_ERROR",
    }
)
#: The vendor refused the request as malformed: the client's request, answered with the status.
CLIENT_FAULTS = {
    "provider.bad_request": 400,
    "provider.unsupported_parameter": 400,
    "provider.not_found": 404,
    "provider.request_too_large": 413,
    "provider.unprocessable": 422,
    "provider.client_error": 400,
}
#: The vendor failed, or refused the gateway's own credentials: not the client's fault.
BAD_GATEWAY = frozenset(
    {"provider.server_error", "provider.auth", "provider.missing_credentials", "provider.invalid_response"}
)
RETRY_AFTER_S = "1"
#: The model made tool calls the gateway did not admit (docs/OPENAI.md, "Tool calls").
REJECTED_TOOL_CALLS_STATUS = 422
#: The turn waits for a reviewer (docs/REVIEWS.md). 423, not 409: the SDKs retry a 409 on their
#: own, each retry waiting again.
REVIEW_PENDING_STATUS = 423
REASON_HEADER = "X-Turngate-Reason-Code"
#: On a recorded outcome (a DENY, a failed call, refused tool calls): a retry of the same
#: request finds the same recorded turn, so the SDKs are told not to retry (both honour
#: ``x-should-retry``); a turn still running (504) is worth a retry, which waits for it.
NO_RETRY = {"x-should-retry": "false"}
OUTPUT_CHECK_HEADER = "X-Turngate-Output-Check"


def execution_error_status(code: str) -> int:
    if code in RATE_LIMITED:
        return 429
    if code in UNAVAILABLE:
        return 503
    if code in CLIENT_FAULTS:
        return CLIENT_FAULTS[code]
    if code in BAD_GATEWAY:
        return 502
    return 500


def failure_of(execution: Event) -> tuple[int, str, str]:
    """A failed EXECUTION's HTTP status, reason code and message."""
    error = execution.payload.get("error") or {}
    code = str(error.get("code") or "provider.error")
    return execution_error_status(code), code, str(error.get("message") or error.get("detail") or code)


def rejected_calls(execution: Event, chat: ChatCompletionRequest) -> list[dict[str, Any]]:
    """The model's calls the gateway refused to forward that the client must hear of (never
    dropped silently: the answer becomes a 422 naming them): calls to the client's own tools, and
    calls to tools nobody offered. A prompt pack's tool called badly is the pack's business
    (recorded, as on every endpoint)."""
    rejected = execution.payload.get("tool_calls_rejected")
    if not isinstance(rejected, list):
        return []
    client_tools = {tool.function.name for tool in chat.tools or ()}
    return [
        call
        for call in rejected
        if isinstance(call, dict)
        and (call.get("name") in client_tools or call.get("reason_code") == "tool.not_offered")
    ]


def rejected_message(rejected: list[dict[str, Any]]) -> tuple[str, str]:
    """(code, message) of an answer whose tool calls were refused."""
    code = str(rejected[0].get("reason_code") or "tool.invalid_arguments")
    parts = [f"{call.get('name')!r} ({call.get('reason_code')}: {call.get('detail')})" for call in rejected]
    return code, "the model's tool calls were not admitted: " + "; ".join(parts)
