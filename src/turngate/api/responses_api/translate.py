"""A Responses API request -> the Chat Completions request planned for it, and the thread.

Input items become messages: a message item a message (its text parts joined), consecutive
``function_call`` items one assistant message with tool calls (joined to the assistant message
just before them, as the Responses API splits one answer into a message and its calls),
``function_call_output`` items tool messages; ``instructions`` a system message first.

The thread: ``previous_response_id`` names a recorded turn of the caller's tenant, whose thread
the call continues with that turn's whole history as declared refs; a call that resends earlier
output items instead (the ids turngate gave them name their turn) continues that turn's thread,
where the resent items match its recorded events like any Chat Completions history.
"""

from __future__ import annotations

import json
import re
from typing import Any

from turngate.api.dropin.plan import Continuation, FrontDoor, Translation, continuation_of, turn_of
from turngate.api.responses_api.request import (
    ContentPart,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputItem,
    ResponsesRequest,
    function_tools,
    input_items,
    parse_request,
)
from turngate.core.client_context import recorded_tool_calls
from turngate.core.events import AdmissionError, Event
from turngate.ledger import LedgerStore

RESPONSE_PREFIX = "resp_"
#: The ids of output items: ``msg_<hex>`` / ``fc_<hex>_<n>``, ``<hex>`` the response's.
ITEM_ID = re.compile(r"^(?:msg|fc)_([0-9a-f]{32})(?:_\d+)?$")
_TEXT_PARTS = {"input_text", "output_text", "text"}


def response_of_item(item_id: str | None) -> str | None:
    """The response id an output item id turngate gave names (None: not one of ours)."""
    found = ITEM_ID.match(item_id or "")
    return RESPONSE_PREFIX + found.group(1) if found else None


def _text(content: str | list[ContentPart], where: str) -> str:
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for index, part in enumerate(content):
        if part.type not in _TEXT_PARTS or part.text is None:
            raise AdmissionError(
                "responses.unsupported_content",
                f"{where}[{index}]: content of type {part.type!r} is not supported (text only)",
                f"{where}[{index}]",
            )
        texts.append(part.text)
    return "".join(texts)


def _call(item: FunctionCallItem) -> dict[str, Any]:
    return {
        "id": item.call_id,
        "type": "function",
        "function": {"name": item.name, "arguments": item.arguments},
    }


def chat_messages(items: list[InputItem]) -> tuple[list[dict[str, Any]], list[str]]:
    """The items as Chat Completions messages, and the item each message came from."""
    messages: list[dict[str, Any]] = []
    origins: list[str] = []
    joinable = False  # the last message is an assistant message made from the item just before
    for index, item in enumerate(items):
        if isinstance(item, FunctionCallItem):
            if joinable:
                messages[-1].setdefault("tool_calls", []).append(_call(item))
                continue
            messages.append({"role": "assistant", "content": None, "tool_calls": [_call(item)]})
        elif isinstance(item, FunctionCallOutputItem):
            text = _text(item.output, f"input[{index}].output")
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": text})
        else:
            messages.append({"role": item.role, "content": _text(item.content, f"input[{index}].content")})
        origins.append(f"input[{index}]")
        joinable = messages[-1]["role"] == "assistant"
    return messages, origins


def _answered(execution: Event) -> dict[str, Any]:
    """The previous response's answer as the assistant message that tool outputs follow."""
    calls = [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
        }
        for call in recorded_tool_calls(execution.payload)
    ]
    text = execution.payload.get("output_text") or None
    return (
        {"role": "assistant", "content": text, "tool_calls": calls}
        if calls
        else {"role": "assistant", "content": text}
    )


def _continuation(previous: str, events: dict[str, Event]) -> Continuation:
    continues = continuation_of(events)
    if continues is None:
        raise AdmissionError(
            "responses.previous_response_not_found",
            f"previous_response_id {previous!r} names no answered response of this tenant "
            "(unknown, denied or failed)",
            "previous_response_id",
        )
    return continues


#: Responses looked up for one request's item ids (the last ones first).
MAX_RESPONSE_LOOKUPS = 16


def _thread_of_items(items: list[InputItem], store: LedgerStore, tenant_id: str | None) -> str | None:
    """The thread of the last resent output item turngate gave an id to (None: none)."""
    tried: set[str] = set()
    for item in reversed(items):
        response = response_of_item(item.id)
        if response is None or response in tried:
            continue
        if len(tried) == MAX_RESPONSE_LOOKUPS:
            return None
        tried.add(response)
        events = turn_of(store, response, tenant_id)
        if "INTENT" in events:
            return events["INTENT"].thread_id
    return None


def _text_format(request: ResponsesRequest) -> dict[str, Any] | None:
    fmt = request.text.format if request.text else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    schema: dict[str, Any] = {"name": fmt.name or "response", "schema": fmt.schema_ or {}}
    if fmt.strict is not None:
        schema["strict"] = fmt.strict
    if fmt.description is not None:
        schema["description"] = fmt.description
    return {"type": "json_schema", "json_schema": schema}


def _tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise AdmissionError(
        "responses.unsupported_parameter",
        f"tool_choice of type {choice.get('type')!r} is not supported ('auto', 'none', 'required' "
        "or a function)",
        "tool_choice",
    )


#: Request fields passed on under the same name, for the Chat Completions path to honour.
_SAME_NAME = (
    "model", "temperature", "top_p", "top_logprobs", "parallel_tool_calls", "metadata", "user",
    "safety_identifier", "service_tier", "prompt_cache_key", "prompt_cache_retention", "stream",
)  # fmt: skip


def chat_body(request: ResponsesRequest, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The Chat Completions body for ``request`` whose messages are ``messages``."""
    body: dict[str, Any] = {
        name: getattr(request, name) for name in _SAME_NAME if getattr(request, name) is not None
    }
    body["messages"] = messages
    tools = function_tools(request)
    if tools:
        body["tools"] = [
            {"type": "function", "function": tool.model_dump(exclude={"type"}, exclude_none=True)}
            for tool in tools
        ]
    choice = _tool_choice(request.tool_choice)
    if choice is not None:
        body["tool_choice"] = choice
    if request.max_output_tokens is not None:
        body["max_completion_tokens"] = request.max_output_tokens
    if request.top_logprobs:
        body["logprobs"] = True
    fmt = _text_format(request)
    if fmt is not None:
        body["response_format"] = fmt
    if request.text and request.text.verbosity:
        body["verbosity"] = request.text.verbosity
    if request.reasoning and request.reasoning.effort:
        body["reasoning_effort"] = request.reasoning.effort
    return body


def translate(data: Any, store: LedgerStore, tenant_id: str | None) -> tuple[ResponsesRequest, Translation]:
    """The validated request, its Chat Completions body and the thread it continues."""
    request = parse_request(data)
    items = input_items(request)
    messages, origins = chat_messages(items)
    if request.previous_response_id is None:
        thread_id, continues = _thread_of_items(items, store, tenant_id), None
    else:
        events = turn_of(store, request.previous_response_id, tenant_id)
        continues = _continuation(request.previous_response_id, events)
        thread_id = continues.thread_id
        if messages and messages[0]["role"] == "tool":  # outputs of its tool calls
            messages.insert(0, _answered(events["EXECUTION"]))
            origins.insert(0, "previous_response_id")
    if request.instructions:
        messages.insert(0, {"role": "system", "content": request.instructions})
        origins.insert(0, "instructions")
    return request, Translation(chat_body(request, messages), thread_id, continues, tuple(origins), "input")


#: ``POST /v1/responses``: ids ``resp_<hex>``, client context source ``openai.responses``.
RESPONSES: FrontDoor[ResponsesRequest] = FrontDoor(translate, RESPONSE_PREFIX, "openai.responses", "input")
