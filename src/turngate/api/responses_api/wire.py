"""The Responses API answer: the ``response`` object, its output items, its error body and its
stream of named events, built from a recorded EXECUTION.

Output items are a ``message`` with the answer text (when there is text), then one
``function_call`` per admitted tool call. Their ids carry the response's: ``msg_<hex>`` and
``fc_<hex>_<n>`` for ``resp_<hex>``, so a client that resends them names the thread.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict

from turngate.api.dropin.sse import sse_frame
from turngate.api.openai_compat.turn import PlannedTurn
from turngate.api.openai_compat.wire import model_of
from turngate.api.responses_api.request import ResponsesRequest, function_tools
from turngate.api.responses_api.translate import RESPONSE_PREFIX
from turngate.api.turn_answer.refusals import Refusal, openai_refusal
from turngate.api.turn_answer.run import Finished, Interrupted, Piece
from turngate.core.client_context import recorded_tool_calls
from turngate.core.events import Event


class ResponseObject(BaseModel):
    """An OpenAI ``response`` (docs/RESPONSES-AND-MESSAGES.md); with ``stream: true`` an SSE
    stream of named ``response.*`` events instead."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: str
    created_at: int
    status: str
    model: str
    output: list[dict[str, Any]]
    usage: dict[str, Any] | None


def _hex(response_id: str) -> str:
    return response_id.removeprefix(RESPONSE_PREFIX)


def message_id(response_id: str) -> str:
    return f"msg_{_hex(response_id)}"


def call_item_id(response_id: str, position: int) -> str:
    return f"fc_{_hex(response_id)}_{position}"


def usage_of(execution: Event) -> dict[str, Any]:
    usage = execution.payload.get("usage") or {}
    prompt, completion = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(response_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [text_part(text)] if status == "completed" else []
    return {
        "id": message_id(response_id),
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def call_items(response_id: str, execution: Event) -> list[dict[str, Any]]:
    return [
        {
            "id": call_item_id(response_id, position),
            "type": "function_call",
            "status": "completed",
            "call_id": call.id,
            "name": call.name,
            "arguments": json.dumps(call.arguments, ensure_ascii=False),
        }
        for position, call in enumerate(recorded_tool_calls(execution.payload))
    ]


def output_items(response_id: str, execution: Event) -> list[dict[str, Any]]:
    text = execution.payload.get("output_text") or ""
    return ([message_item(response_id, text)] if text else []) + call_items(response_id, execution)


class ResponsesWire:
    """Renders one call's answer (``request`` as sent, ``turn`` as planned)."""

    def __init__(self, request: ResponsesRequest, turn: PlannedTurn) -> None:
        self.request = request
        self.turn = turn
        self.created_at = int(time.time())

    def response(
        self,
        status: str,
        output: list[dict[str, Any]],
        execution: Event | None = None,
        error: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """The ``response`` object (in progress: no execution yet)."""
        request = self.request
        fmt = request.text.format if request.text else None
        redacted = execution is not None and bool(execution.payload.get("redacted"))
        return {
            "id": self.turn.correlation_id,
            "object": "response",
            "created_at": self.created_at,
            "status": "incomplete" if redacted else status,
            "background": False,
            "error": error,
            "incomplete_details": {"reason": "content_filter"} if redacted else None,
            "instructions": request.instructions,
            "max_output_tokens": request.max_output_tokens,
            "metadata": request.metadata or {},
            "model": model_of(execution, request.model) if execution else request.model,
            "output": output,
            "parallel_tool_calls": request.parallel_tool_calls is not False,
            "previous_response_id": request.previous_response_id,
            "reasoning": {"effort": request.reasoning.effort if request.reasoning else None, "summary": None},
            "store": True,
            "temperature": request.temperature,
            "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt else {"type": "text"}},
            "tool_choice": request.tool_choice or "auto",
            "tools": [tool.model_dump(exclude_none=True) for tool in function_tools(request)],
            "top_p": request.top_p,
            "truncation": request.truncation or "disabled",
            "usage": usage_of(execution) if execution else None,
            "user": request.user,
        }

    def error(self, refusal: Refusal) -> Response:
        return openai_refusal(refusal)

    def answer(self, execution: Event, headers: dict[str, str]) -> Response:
        body = self.response("completed", output_items(self.turn.correlation_id, execution), execution)
        return JSONResponse(body, headers=headers)

    async def frames(self, pieces: AsyncIterator[Piece]) -> AsyncIterator[str]:
        """The named events of a streamed response, in the order OpenAI sends them: the message
        item opens with the first text; tool calls and the end come from the recorded EXECUTION."""
        events = _Sequence()
        rid = self.turn.correlation_id
        opened = False
        yield events.frame("response.created", response=self.response("in_progress", []))
        yield events.frame("response.in_progress", response=self.response("in_progress", []))
        async for piece in pieces:
            if isinstance(piece, Interrupted):
                # OpenAI's error event (the code, as the unstreamed error's), then the response
                # ends failed with the same error.
                yield events.frame("error", code=piece.code, message=piece.message, param=None)
                error = {"code": piece.code, "message": piece.message}
                yield events.frame("response.failed", response=self.response("failed", [], error=error))
                return
            if isinstance(piece, Finished):
                break
            if not opened:
                opened = True
                for frame in _open_message(events, rid):
                    yield frame
            yield _text_delta(events, rid, piece.text)
        else:
            return
        execution = piece.execution
        output = output_items(rid, execution)
        recorded = execution.payload.get("output_text") or ""
        if recorded and not opened:  # recorded, never streamed (no token reached this stream)
            opened = True
            for frame in [*_open_message(events, rid), _text_delta(events, rid, recorded)]:
                yield frame
        if opened:
            done = message_item(rid, recorded)
            where = {"item_id": done["id"], "output_index": 0, "content_index": 0}
            yield events.frame("response.output_text.done", **where, text=recorded, logprobs=[])
            yield events.frame("response.content_part.done", **where, part=text_part(recorded))
            yield events.frame("response.output_item.done", output_index=0, item=done)
            output = [done] + [item for item in output if item["type"] == "function_call"]
        for index, item in enumerate(output):
            if item["type"] != "function_call":
                continue
            where = {"item_id": item["id"], "output_index": index}
            opening = item | {"arguments": "", "status": "in_progress"}
            yield events.frame("response.output_item.added", output_index=index, item=opening)
            yield events.frame("response.function_call_arguments.delta", **where, delta=item["arguments"])
            yield events.frame(
                "response.function_call_arguments.done",
                **where,
                name=item["name"],
                arguments=item["arguments"],
            )
            yield events.frame("response.output_item.done", output_index=index, item=item)
        final = self.response("completed", output, execution)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        yield events.frame(kind, response=final)


def _open_message(events: _Sequence, response_id: str) -> list[str]:
    where = {"item_id": message_id(response_id), "output_index": 0, "content_index": 0}
    return [
        events.frame(
            "response.output_item.added", output_index=0, item=message_item(response_id, "", "in_progress")
        ),
        events.frame("response.content_part.added", **where, part=text_part("")),
    ]


def _text_delta(events: _Sequence, response_id: str, text: str) -> str:
    where = {"item_id": message_id(response_id), "output_index": 0, "content_index": 0}
    return events.frame("response.output_text.delta", **where, delta=text, logprobs=[])


class _Sequence:
    """Numbers a stream's events (``sequence_number``, from 0)."""

    def __init__(self) -> None:
        self.next = 0

    def frame(self, kind: str, **data: Any) -> str:
        number, self.next = self.next, self.next + 1
        return sse_frame(kind, {"type": kind, "sequence_number": number, **data})
