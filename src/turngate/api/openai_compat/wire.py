"""The OpenAI Chat Completions wire format: the request turngate accepts, the error object, and
the ``chat.completion`` / ``chat.completion.chunk`` bodies built from recorded events."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from turngate.core.client_context import recorded_tool_calls
from turngate.core.events import AdmissionError, Event
from turngate.core.json_depth import EMBEDDED_NOT_UTF8, EMBEDDED_TOO_DEEP, embedded_json_problem

#: OpenAI error ``type`` per HTTP status class (what SDKs show next to the message).
_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


def error_type_for(status: int) -> str:
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    return "server_error" if status >= 500 else "invalid_request_error"


def openai_error(
    status: int,
    code: str,
    message: str,
    *,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """``{"error": {message, type, param, code}}``: ``code`` is turngate's reason code."""
    body = {"error": {"message": message, "type": error_type_for(status), "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


# --------------------------------------------------------------------------- the request

#: Validation error types of a tool call's arguments, and the reason codes they answer.
_ARGUMENT_ERRORS = {EMBEDDED_TOO_DEEP: "arguments_too_deep", EMBEDDED_NOT_UTF8: "arguments_not_utf8"}
_REASON_BY_ERROR = {
    "missing": "admission.missing_field",
    "arguments_too_deep": "admission.too_deep",
    "arguments_not_utf8": "openai.invalid_tool_call",
}


class _Open(BaseModel):
    # OpenAI adds fields often: unknown ones are accepted and ignored (never recorded).
    model_config = ConfigDict(extra="ignore")


class ContentPart(_Open):
    type: str
    text: str | None = None


class RequestFunctionCall(_Open):
    name: str
    arguments: str = "{}"  # JSON text, as the SDK sends it back

    @field_validator("arguments")
    @classmethod
    def _bounded_json(cls, text: str) -> str:
        # JSON inside a string: the body's depth check never sees it, json.loads would recurse
        # into it, and a lone surrogate in it could never be recorded as UTF-8.
        problem = embedded_json_problem(text)
        if problem is not None:
            kind, detail = problem
            raise PydanticCustomError(_ARGUMENT_ERRORS[kind], f"the arguments JSON {detail}")
        return text


class RequestToolCall(_Open):
    id: Annotated[str, Field(min_length=1, max_length=256)]
    type: Literal["function"] = "function"
    function: RequestFunctionCall


class RequestMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[RequestToolCall] | None = None
    tool_call_id: Annotated[str, Field(min_length=1, max_length=256)] | None = None

    def text(self, position: int) -> str | None:
        """The message's text; parts other than text are refused."""
        if self.content is None or isinstance(self.content, str):
            return self.content
        texts: list[str] = []
        for part in self.content:
            if part.type != "text" or part.text is None:
                raise AdmissionError(
                    "openai.unsupported_content",
                    f"messages[{position}]: content parts of type {part.type!r} are not supported "
                    "(text only)",
                    f"messages[{position}].content",
                )
            texts.append(part.text)
        return "".join(texts)


class FunctionDefinition(_Open):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class RequestTool(_Open):
    type: Literal["function"]
    function: FunctionDefinition


class StreamOptions(_Open):
    include_usage: bool = False


class ChatCompletionRequest(_Open):
    model: Annotated[str, Field(min_length=1)]
    messages: Annotated[list[RequestMessage], Field(min_length=1)]
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[RequestTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    n: int | None = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


def parse_chat_request(data: Any) -> ChatCompletionRequest:
    if not isinstance(data, dict):
        raise AdmissionError("admission.invalid_type", "the request must be a JSON object")
    try:
        request = ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        code = _REASON_BY_ERROR.get(str(first.get("type")), "admission.invalid_value")
        raise AdmissionError(code, f"{where}: {first.get('msg')}", where) from exc
    if request.n not in (None, 1):
        raise AdmissionError("openai.unsupported_parameter", "n must be 1 (one turn, one answer)", "n")
    return request


# --------------------------------------------------------------------------- the answer


def _epoch(event: Event) -> int:
    if event.created_at:
        try:
            return int(datetime.fromisoformat(event.created_at).timestamp())
        except ValueError:
            pass
    return int(time.time())


def usage_of(execution: Event) -> dict[str, int]:
    usage = execution.payload.get("usage") or {}
    prompt = int(usage.get("input_tokens") or 0)
    completion = int(usage.get("output_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def tool_calls_of(execution: Event) -> list[dict[str, Any]]:
    """The admitted tool calls in OpenAI's shape (arguments as a JSON string)."""
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
        }
        for call in recorded_tool_calls(execution.payload)
    ]


def finish_reason(execution: Event) -> str:
    if execution.payload.get("redacted"):
        return "content_filter"
    if execution.payload.get("tool_calls"):
        return "tool_calls"
    return "stop"


def model_of(execution: Event, requested: str) -> str:
    model = execution.payload.get("resolved_model_id") or execution.payload.get("model_id")
    return str(model) if model else requested


def completion_body(execution: Event, requested_model: str) -> dict[str, Any]:
    """A ``chat.completion`` object for a recorded EXECUTION (its ``id``: the correlation id)."""
    text = execution.payload.get("output_text") or ""
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    calls = tool_calls_of(execution)
    if calls:
        message["tool_calls"] = calls
    return {
        "id": execution.correlation_id,
        "object": "chat.completion",
        "created": _epoch(execution),
        "model": model_of(execution, requested_model),
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason(execution)}
        ],
        "usage": usage_of(execution),
        "system_fingerprint": None,
    }


def chunk_frame(
    correlation_id: str,
    model: str,
    created: int,
    delta: dict[str, Any] | None,
    *,
    finish: str | None = None,
    usage: dict[str, int] | None = None,
) -> str:
    """One ``data:`` frame of a ``chat.completion.chunk`` (``delta=None``: the usage-only chunk,
    whose ``choices`` is empty)."""
    chunk: dict[str, Any] = {
        "id": correlation_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if usage is not None:
        chunk["usage"] = usage
    return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"


def error_frame(status: int, code: str, message: str) -> str:
    """An error inside a stream (the SDK raises ``APIError`` with this body)."""
    body = {"error": {"message": message, "type": error_type_for(status), "param": None, "code": code}}
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


DONE_FRAME = "data: [DONE]\n\n"
