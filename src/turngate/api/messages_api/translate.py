"""An Anthropic Messages request -> the Chat Completions request planned for it, and the thread.

``system`` becomes a system message; a user message's text blocks a user message, its
``tool_result`` blocks tool messages (one each); an assistant message's text blocks and
``tool_use`` blocks one assistant message with tool calls.

Tool-use ids: turngate answers each tool call as ``toolu_<hex>_<n>`` (``<hex>`` the message id's,
``n`` the call's position) and maps such an id back to the recorded call's id when the client
sends it again, so a tool loop resent by a stateless client names its thread, and its resent
calls and results match the recorded events like any Chat Completions history.
"""

from __future__ import annotations

import json
import re
from typing import Any

from turngate.api.dropin.plan import FrontDoor, Translation, turn_of
from turngate.api.messages_api.request import (
    MessagesRequest,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    blocks,
    custom_tools,
    parse_request,
)
from turngate.core.client_context import recorded_tool_calls
from turngate.core.events import AdmissionError
from turngate.ledger import LedgerStore

MESSAGE_PREFIX = "msg_"
TOOL_USE_ID = re.compile(r"^toolu_([0-9a-f]{32})_(\d+)$")
#: Turns looked up for one request's tool-use ids; ids of further turns stay as sent. More could
#: never match: each matched turn adds two declared refs, and a turn declares at most 256.
MAX_TURN_LOOKUPS = 128


def tool_use_id(message_id: str, position: int) -> str:
    """The id a client is given for the tool call at ``position`` of message ``message_id``."""
    return f"toolu_{message_id.removeprefix(MESSAGE_PREFIX)}_{position}"


class CallIds:
    """Maps the tool-use ids turngate gave back to the recorded call ids; notes their thread."""

    def __init__(self, store: LedgerStore, tenant_id: str | None) -> None:
        self.store = store
        self.tenant_id = tenant_id
        self.thread_id: str | None = None
        self._turns: dict[str, tuple[str, list[str]] | None] = {}

    def _turn(self, message_id: str) -> tuple[str, list[str]] | None:
        if message_id not in self._turns and len(self._turns) < MAX_TURN_LOOKUPS:
            events = turn_of(self.store, message_id, self.tenant_id)
            intent, execution = events.get("INTENT"), events.get("EXECUTION")
            found = None
            if intent is not None and execution is not None:
                found = (intent.thread_id, [call.id for call in recorded_tool_calls(execution.payload)])
            self._turns[message_id] = found
        return self._turns.get(message_id)

    def recorded(self, given: str) -> str:
        """The recorded id of the call ``given`` names (``given`` itself when it names none)."""
        match = TOOL_USE_ID.match(given)
        turn = self._turn(MESSAGE_PREFIX + match.group(1)) if match else None
        if match is None or turn is None or int(match.group(2)) >= len(turn[1]):
            return given
        self.thread_id = turn[0]
        return turn[1][int(match.group(2))]


def _parts(texts: list[TextBlock]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": block.text} for block in texts]


def _user(typed: list[Any], position: int, ids: CallIds) -> list[dict[str, Any]]:
    results = [block for block in typed if isinstance(block, ToolResultBlock)]
    texts = [block for block in typed if isinstance(block, TextBlock)]
    if len(results) + len(texts) != len(typed):
        raise AdmissionError(
            "anthropic.unsupported_content",
            f"messages[{position}]: a user message holds text and tool_result blocks only",
            f"messages[{position}].content",
        )
    if results and texts:
        raise AdmissionError(
            "anthropic.unsupported_content",
            f"messages[{position}]: a user message with tool_result blocks may hold nothing else "
            "(send the text as the next user message, after the model's answer)",
            f"messages[{position}].content",
        )
    if results:
        return [
            {"role": "tool", "tool_call_id": ids.recorded(block.tool_use_id), "content": block.text()}
            for block in results
        ]
    return [{"role": "user", "content": _parts(texts)}]


def _assistant(typed: list[Any], position: int, ids: CallIds) -> dict[str, Any]:
    texts = [block for block in typed if isinstance(block, TextBlock)]
    uses = [block for block in typed if isinstance(block, ToolUseBlock)]
    if len(texts) + len(uses) != len(typed):
        raise AdmissionError(
            "anthropic.unsupported_content",
            f"messages[{position}]: an assistant message holds text and tool_use blocks only",
            f"messages[{position}].content",
        )
    message: dict[str, Any] = {"role": "assistant", "content": _parts(texts) or None}
    if uses:
        message["tool_calls"] = [
            {
                "id": ids.recorded(block.id),
                "type": "function",
                "function": {"name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)},
            }
            for block in uses
        ]
    return message


def _tool_choice(request: MessagesRequest) -> str | dict[str, Any] | None:
    choice = request.tool_choice
    if choice is None:
        return None
    if choice.type == "tool":
        if not choice.name:
            raise AdmissionError("admission.missing_field", "tool_choice.name: required", "tool_choice.name")
        return {"type": "function", "function": {"name": choice.name}}
    return {"auto": "auto", "any": "required", "none": "none"}[choice.type]


def chat_body(request: MessagesRequest, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The Chat Completions body for ``request`` whose messages are ``messages``."""
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": messages,
        "stream": request.stream,
    }
    for name in ("temperature", "top_p", "service_tier"):
        if getattr(request, name) is not None:
            body[name] = getattr(request, name)
    if request.stop_sequences:
        body["stop"] = request.stop_sequences
    if request.metadata and request.metadata.user_id:
        body["user"] = request.metadata.user_id
    tools = custom_tools(request)
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.input_schema,
                }
                | ({"strict": tool.strict} if tool.strict is not None else {}),
            }
            for tool in tools
        ]
    choice = _tool_choice(request)
    if choice is not None:
        body["tool_choice"] = choice
    if request.tool_choice and request.tool_choice.disable_parallel_tool_use:
        body["parallel_tool_calls"] = False
    config = request.output_config
    if config and config.format:
        schema = {"name": "output", "schema": config.format.schema_, "strict": True}
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    if config and config.effort:
        body["reasoning_effort"] = config.effort
    return body


def translate(data: Any, store: LedgerStore, tenant_id: str | None) -> tuple[MessagesRequest, Translation]:
    """The validated request, its Chat Completions body and the thread its tool ids name."""
    request = parse_request(data)
    ids = CallIds(store, tenant_id)
    messages: list[dict[str, Any]] = []
    origins: list[str] = []
    if request.system:
        system = request.system
        messages.append({"role": "system", "content": system if isinstance(system, str) else _parts(system)})
        origins.append("system")
    for position, message in enumerate(request.messages):
        typed = blocks(message, position)
        made = _user(typed, position, ids) if message.role == "user" else [_assistant(typed, position, ids)]
        messages += made
        origins += [f"messages[{position}]"] * len(made)
    body = chat_body(request, messages)
    return request, Translation(body, ids.thread_id, origins=tuple(origins))


#: ``POST /v1/messages``: ids ``msg_<hex>``, client context source ``anthropic.messages``.
MESSAGES: FrontDoor[MessagesRequest] = FrontDoor(translate, MESSAGE_PREFIX, "anthropic.messages", "messages")
