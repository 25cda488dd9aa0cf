"""The Anthropic Messages answer: the ``message`` object, its error body and its stream of named
events (``message_start`` ... ``message_stop``), built from a recorded EXECUTION.

Content is a text block (when there is text), then one ``tool_use`` block per admitted tool call,
whose id is ``toolu_<hex>_<n>`` (see :mod:`turngate.api.messages_api.translate`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict

from turngate.api.dropin.sse import sse_frame
from turngate.api.messages_api.request import MessagesRequest
from turngate.api.messages_api.translate import tool_use_id
from turngate.api.openai_compat.turn import PlannedTurn
from turngate.api.openai_compat.wire import model_of
from turngate.api.turn_answer.refusals import Refusal
from turngate.api.turn_answer.run import Finished, Interrupted, Piece
from turngate.core.client_context import recorded_tool_calls
from turngate.core.events import Event


class MessageObject(BaseModel):
    """An Anthropic ``message`` (docs/RESPONSES-AND-MESSAGES.md); with ``stream: true`` an SSE
    stream of named events (``message_start`` ... ``message_stop``) instead."""

    model_config = ConfigDict(extra="allow")

    id: str
    type: str
    role: str
    model: str
    content: list[dict[str, Any]]
    stop_reason: str | None
    usage: dict[str, int]


#: Anthropic's error ``type`` per HTTP status (what its SDK shows next to the message).
_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}


def error_type_for(status: int) -> str:
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def error_body(status: int, code: str, message: str) -> dict[str, Any]:
    """``{"type": "error", "error": {type, message, code}}``: ``code`` is turngate's reason code
    (an addition to Anthropic's shape; the SDK keeps it in the exception's ``body``)."""
    return {"type": "error", "error": {"type": error_type_for(status), "message": message, "code": code}}


def anthropic_error(refusal: Refusal) -> JSONResponse:
    body = error_body(refusal.status, refusal.code, refusal.message)
    if refusal.param:
        body["error"]["param"] = refusal.param
    return JSONResponse(body, status_code=refusal.status, headers=refusal.headers or None)


def usage_of(execution: Event) -> dict[str, int]:
    usage = execution.payload.get("usage") or {}
    return {
        "input_tokens": int(usage.get("input_tokens") or 0),
        "output_tokens": int(usage.get("output_tokens") or 0),
    }


def stop_reason(execution: Event) -> str:
    if execution.payload.get("redacted"):
        return "refusal"
    return "tool_use" if execution.payload.get("tool_calls") else "end_turn"


def tool_use_blocks(message_id: str, execution: Event) -> list[dict[str, Any]]:
    return [
        {
            "type": "tool_use",
            "id": tool_use_id(message_id, position),
            "name": call.name,
            "input": call.arguments,
        }
        for position, call in enumerate(recorded_tool_calls(execution.payload))
    ]


class MessagesWire:
    """Renders one call's answer (``request`` as sent, ``turn`` as planned)."""

    def __init__(self, request: MessagesRequest, turn: PlannedTurn) -> None:
        self.request = request
        self.turn = turn

    def message(self, content: list[dict[str, Any]], execution: Event | None) -> dict[str, Any]:
        return {
            "id": self.turn.correlation_id,
            "type": "message",
            "role": "assistant",
            "model": model_of(execution, self.request.model) if execution else self.request.model,
            "content": content,
            "stop_reason": stop_reason(execution) if execution else None,
            "stop_sequence": None,
            "usage": usage_of(execution) if execution else {"input_tokens": 0, "output_tokens": 0},
        }

    def error(self, refusal: Refusal) -> Response:
        return anthropic_error(refusal)

    def answer(self, execution: Event, headers: dict[str, str]) -> Response:
        text = execution.payload.get("output_text") or ""
        content = ([{"type": "text", "text": text}] if text else []) + tool_use_blocks(
            self.turn.correlation_id, execution
        )
        return JSONResponse(self.message(content, execution), headers=headers)

    async def frames(self, pieces: AsyncIterator[Piece]) -> AsyncIterator[str]:
        """The named events of a streamed message, in the order Anthropic sends them: the text
        block opens with the first text; tool calls and the end come from the recorded EXECUTION."""
        yield sse_frame("message_start", {"type": "message_start", "message": self.message([], None)})
        yield sse_frame("ping", {"type": "ping"})
        opened = False
        async for piece in pieces:
            if isinstance(piece, Interrupted):
                yield sse_frame("error", error_body(piece.status, piece.code, piece.message))
                return
            if isinstance(piece, Finished):
                break
            if not opened:
                opened = True
                yield _block_start(0, {"type": "text", "text": ""})
            yield _delta(0, {"type": "text_delta", "text": piece.text})
        else:
            return
        execution = piece.execution
        recorded = execution.payload.get("output_text") or ""
        if recorded and not opened:  # recorded, never streamed (no token reached this stream)
            opened = True
            yield _block_start(0, {"type": "text", "text": ""})
            yield _delta(0, {"type": "text_delta", "text": recorded})
        index = 0
        if opened:
            yield _block_stop(0)
            index = 1
        for block in tool_use_blocks(self.turn.correlation_id, execution):
            yield _block_start(index, block | {"input": {}})
            yield _delta(index, {"type": "input_json_delta", "partial_json": json.dumps(block["input"])})
            yield _block_stop(index)
            index += 1
        delta = {"stop_reason": stop_reason(execution), "stop_sequence": None}
        yield sse_frame(
            "message_delta", {"type": "message_delta", "delta": delta, "usage": usage_of(execution)}
        )
        yield sse_frame("message_stop", {"type": "message_stop"})


def _block_start(index: int, block: dict[str, Any]) -> str:
    return sse_frame(
        "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
    )


def _delta(index: int, delta: dict[str, Any]) -> str:
    return sse_frame("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def _block_stop(index: int) -> str:
    return sse_frame("content_block_stop", {"type": "content_block_stop", "index": index})
