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
from turngate.core.request_options import ReasoningEffort, RequestOptions, ResponseFormat, ToolChoice

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
    # Inside messages, tools and options: what SDKs echo back (an assistant message's
    # ``refusal``, ``annotations``, a participant ``name``) is accepted and ignored. The request's
    # own fields are all listed (ChatCompletionRequest): an unknown one is refused.
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
    strict: bool | None = None


class RequestTool(_Open):
    type: Literal["function"]
    function: FunctionDefinition


class StreamOptions(_Open):
    include_usage: bool = False


#: Request fields this gateway cannot honour: refused (400 ``openai.unsupported_parameter``)
#: when set to anything but their default (docs/OPENAI.md, "Request fields").
REFUSED_FIELDS = (
    "audio",
    "functions",
    "function_call",
    "prediction",
    "web_search_options",
    "top_logprobs",
    "service_tier",
    "verbosity",
    "prompt_cache_key",
    "prompt_cache_retention",
    "safety_identifier",
)
UNSUPPORTED_PARAMETER = "openai.unsupported_parameter"


class ChatCompletionRequest(BaseModel):
    """Every field of OpenAI's Chat Completions request: each is honoured, recorded or refused;
    a field this model does not know is refused (``openai.unsupported_parameter``)."""

    model_config = ConfigDict(extra="forbid")

    model: Annotated[str, Field(min_length=1)]
    messages: Annotated[list[RequestMessage], Field(min_length=1)]
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    tools: list[RequestTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    reasoning_effort: ReasoningEffort | None = None
    logprobs: bool | None = None
    logit_bias: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    n: int | None = None
    store: bool | None = None
    modalities: list[str] | None = None
    audio: Any = None
    functions: Any = None
    function_call: Any = None
    prediction: Any = None
    web_search_options: Any = None
    top_logprobs: Any = None
    service_tier: Any = None
    verbosity: Any = None
    prompt_cache_key: Any = None
    prompt_cache_retention: Any = None
    safety_identifier: Any = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def streamed(self) -> bool:
        return bool(self.stream)


def _refuse(field: str, why: str) -> AdmissionError:
    return AdmissionError(UNSUPPORTED_PARAMETER, f"{field}: {why} (docs/OPENAI.md, 'Request fields')", field)


def _check_refused(request: ChatCompletionRequest) -> None:
    for name in REFUSED_FIELDS:
        if getattr(request, name) is not None:
            raise _refuse(name, "not supported by this gateway")
    if request.n not in (None, 1):
        raise _refuse("n", "must be 1 (one turn, one answer)")
    if request.logprobs:
        raise _refuse("logprobs", "log probabilities are not recorded or returned")
    if request.logit_bias:
        raise _refuse("logit_bias", "not supported by this gateway")
    if request.store:
        raise _refuse("store", "this gateway does not store completions at the vendor")
    if request.modalities not in (None, ["text"]):
        raise _refuse("modalities", "only text is supported")
    extra = sorted(set(request.metadata or {}) - {"thread_id", "idempotency_key"})
    if extra:
        raise _refuse("metadata", f"keys {extra} are not supported (only thread_id, idempotency_key)")


def _response_format(raw: dict[str, Any] | None) -> ResponseFormat | None:
    if raw is None or raw.get("type") == "text":
        return None  # text is the default: nothing to ask for or check
    if raw.get("type") == "json_schema" and isinstance(raw.get("json_schema"), dict):
        inner = raw["json_schema"]
        if not isinstance(inner.get("schema", {}), dict):
            raise AdmissionError(
                "admission.invalid_value",
                "response_format.json_schema.schema must be an object",
                "response_format",
            )
    try:
        return ResponseFormat.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in ("response_format", *first.get("loc", ())))
        raise AdmissionError("admission.invalid_value", f"{where}: {first.get('msg')}", where) from exc


def _tool_choice(raw: str | dict[str, Any] | None, tools: list[RequestTool] | None) -> ToolChoice | None:
    if raw is None:
        return None
    names = {tool.function.name for tool in tools or ()}
    if isinstance(raw, str):
        if raw not in ("none", "auto", "required"):
            raise AdmissionError(
                "admission.invalid_value", f"tool_choice {raw!r} is not none, auto or required", "tool_choice"
            )
        if raw == "required" and not names:
            raise AdmissionError(
                "openai.invalid_tool_choice", "tool_choice 'required' needs tools", "tool_choice"
            )
        return ToolChoice(mode=raw)
    function = raw.get("function")
    name = function.get("name") if raw.get("type") == "function" and isinstance(function, dict) else None
    if not isinstance(name, str):
        raise _refuse("tool_choice", "only none, auto, required or {type: function, function: {name}}")
    if name not in names:
        raise AdmissionError(
            "openai.invalid_tool_choice",
            f"tool_choice names {name!r}, which is not among the tools offered ({sorted(names)})",
            "tool_choice",
        )
    return ToolChoice(mode="function", name=name)


def request_options(request: ChatCompletionRequest) -> RequestOptions | None:
    """The options the request set, as they are recorded (None: it set none)."""
    stop = [request.stop] if isinstance(request.stop, str) else request.stop
    choice = _tool_choice(request.tool_choice, request.tools)
    options = RequestOptions(
        response_format=_response_format(request.response_format),
        # auto is what an offered tool means, none is honoured by offering no tools: only a
        # forced choice is recorded and sent
        tool_choice=choice if choice is not None and choice.mode in ("required", "function") else None,
        parallel_tool_calls=request.parallel_tool_calls,
        top_p=request.top_p,
        seed=request.seed,
        stop=tuple(stop) if stop else None,
        frequency_penalty=request.frequency_penalty,
        presence_penalty=request.presence_penalty,
        reasoning_effort=request.reasoning_effort,
        max_completion_tokens=True if request.max_completion_tokens is not None else None,
    )
    return options if options.recorded() else None


def parse_chat_request(data: Any) -> ChatCompletionRequest:
    if not isinstance(data, dict):
        raise AdmissionError("admission.invalid_type", "the request must be a JSON object")
    try:
        request = ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        if first.get("type") == "extra_forbidden":
            raise _refuse(where, "unknown to this gateway") from exc
        code = _REASON_BY_ERROR.get(str(first.get("type")), "admission.invalid_value")
        raise AdmissionError(code, f"{where}: {first.get('msg')}", where) from exc
    _check_refused(request)
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
