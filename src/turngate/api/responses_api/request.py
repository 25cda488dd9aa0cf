"""The Responses API request turngate accepts: the body, its input items and its tools.

Fields turngate cannot honour are refused by name (400 ``responses.unsupported_parameter``);
fields OpenAI adds later are ignored, as on ``/v1/chat/completions``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from turngate.api.dropin.request import Open, parse_body, validated
from turngate.core.events import AdmissionError


class TextFormat(Open):
    type: Literal["text", "json_schema", "json_object"]
    name: str | None = None
    schema_: Annotated[dict[str, Any] | None, Field(alias="schema")] = None
    description: str | None = None
    strict: bool | None = None


class TextConfig(Open):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class Reasoning(Open):
    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None


class FunctionTool(Open):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ContentPart(Open):
    type: str
    text: str | None = None


class MessageItem(Open):
    type: Literal["message"] = "message"
    id: str | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]


class FunctionCallItem(Open):
    type: Literal["function_call"]
    id: str | None = None
    call_id: Annotated[str, Field(min_length=1, max_length=256)]
    name: str
    arguments: str = "{}"


class FunctionCallOutputItem(Open):
    type: Literal["function_call_output"]
    id: str | None = None
    call_id: Annotated[str, Field(min_length=1, max_length=256)]
    output: str | list[ContentPart]


InputItem = MessageItem | FunctionCallItem | FunctionCallOutputItem
_ITEMS: dict[str, type[InputItem]] = {
    "message": MessageItem,
    "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
}

#: Request fields turngate cannot honour: refused when sent with a value.
REFUSED = {
    "background": "background responses (the answer is the turn's, waited for or streamed)",
    "conversation": "the Conversations API (continue a thread with previous_response_id)",
    "prompt": "stored prompt templates (a prompt pack's system prompt applies to every turn)",
    "max_tool_calls": "built-in tool call limits (no built-in tools are offered)",
    "context_management": "server-side compaction (the history is the thread's declared refs)",
    "moderation": "request moderation settings (policies decide)",
    "image": "image generation settings",
    "access_programs": "access programs",
    "background_options": "background responses",
}


class ResponsesRequest(Open):
    model: Annotated[str, Field(min_length=1)]
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    stream: bool = False
    previous_response_id: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    reasoning: Reasoning | None = None
    store: bool | None = None
    include: list[str] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None


def unsupported(field: str, what: str) -> AdmissionError:
    return AdmissionError("responses.unsupported_parameter", f"{field}: {what} not supported", field)


def parse_request(data: Any) -> ResponsesRequest:
    request = parse_body(
        data, ResponsesRequest, REFUSED, lambda name, what: unsupported(name, what + " are"), (None, False)
    )
    if request.store is False:
        raise unsupported("store", "store: false (every turn is recorded in the ledger) is")
    if request.include:
        raise unsupported("include", f"include {request.include!r} (no extra output is produced) is")
    if request.reasoning and (request.reasoning.summary or request.reasoning.generate_summary):
        raise unsupported("reasoning.summary", "reasoning summaries are")
    return request


def input_items(request: ResponsesRequest) -> list[InputItem]:
    """The request's input as typed items (a string is one user message)."""
    if isinstance(request.input, str):
        return [MessageItem(role="user", content=request.input)]
    items: list[InputItem] = []
    for index, raw in enumerate(request.input):
        kind = raw.get("type", "message" if "role" in raw else None)
        model = _ITEMS.get(str(kind))
        if model is None:
            raise AdmissionError(
                "responses.unsupported_input",
                f"input[{index}]: items of type {kind!r} are not supported (messages, "
                "function_call and function_call_output)",
                f"input[{index}]",
            )
        items.append(validated(model, raw, f"input[{index}]"))
    return items


def function_tools(request: ResponsesRequest) -> list[FunctionTool]:
    tools: list[FunctionTool] = []
    for index, raw in enumerate(request.tools or ()):
        if raw.get("type") != "function":
            raise AdmissionError(
                "responses.unsupported_tool",
                f"tools[{index}]: tools of type {raw.get('type')!r} are not supported (function tools)",
                f"tools[{index}]",
            )
        tools.append(validated(FunctionTool, raw, f"tools[{index}]"))
    return tools
