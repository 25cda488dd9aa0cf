"""An OpenAI Chat Completions request -> the intent envelope of one turn.

The last message is the turn's message (it must be a user message), or the last messages are the
results of the tool calls of the assistant message before them (a tool loop continues: they are
recorded as ``client_context.tool_results`` and the message is their contents joined). A
``temperature`` and the other request options (structured output, forced tool choice, sampling)
are recorded in the client context too (only when sent). The thread is the one named, else the
one a stateless client's history continues (:mod:`~turngate.api.openai_compat.conversation`),
else a new one; the turn id comes from the idempotency key, else from the messages. Earlier
user/assistant messages that match recorded events of the thread become declared refs; the rest
is recorded as client context, or, on a named thread, refused
(``TURNGATE_OPENAI_UNMATCHED_HISTORY``). System (and developer) messages are recorded as client
context and placed after the prompt pack's system prompt, or refused
(``TURNGATE_OPENAI_CLIENT_SYSTEM``). Function tools are recorded as client tools.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from turngate.api.openai_compat.conversation import (
    ID_PREFIX,
    choose_turn_id,
    continued_thread,
    is_retry,
    message_chain,
)
from turngate.api.openai_compat.history import HistoryMatch, HistoryMessage, match_history
from turngate.api.openai_compat.wire import ChatCompletionRequest, RequestMessage, request_options
from turngate.core.client_context import (
    CLIENT_CONTEXT_KEY,
    ClientMessage,
    ClientTool,
    ClientToolCall,
    ClientToolResult,
)
from turngate.core.events import AdmissionError, Event
from turngate.core.header_values import decode_header_id
from turngate.core.request_options import REQUEST_OPTIONS_KEY
from turngate.ledger import LedgerStore
from turngate.ledger.rows import (
    MAX_PAGE,
)
from turngate.settings import Settings

THREAD_HEADER = "X-Turngate-Thread"
IDEMPOTENCY_HEADER = "Idempotency-Key"
CLIENT_CONTEXT_SOURCE = "openai.chat_completions"
STREAM_ID = "default"


@dataclass(frozen=True)
class PlannedTurn:
    envelope: dict[str, Any]
    correlation_id: str
    thread_id: str
    refs: int  # history messages that became declared refs
    client_messages: int  # system messages and unmatched history recorded as client context
    tenant_id: str | None = None  # the caller's: part of the turn's identity

    @property
    def key(self) -> tuple[str | None, str, str, str]:
        """The turn's identity, as the ledger watcher keys it: (tenant, stream, thread, turn)."""
        return (self.tenant_id, STREAM_ID, self.thread_id, self.correlation_id)


@dataclass(frozen=True)
class _Split:
    current: str
    system: list[ClientMessage]
    history: list[HistoryMessage]
    tool_results: list[ClientToolResult]  # this turn's input when it continues a tool loop


def _tool_calls(message: RequestMessage, position: int) -> tuple[ClientToolCall, ...]:
    calls: list[ClientToolCall] = []
    for call in message.tool_calls or ():
        try:
            arguments = json.loads(call.function.arguments or "{}")
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            raise AdmissionError(
                "openai.invalid_tool_call",
                f"messages[{position}]: the arguments of tool call {call.id!r} are not a JSON object",
                f"messages[{position}].tool_calls",
            )
        calls.append(ClientToolCall(id=call.id, name=call.function.name, arguments=arguments))
    return tuple(calls)


def _tool_result(message: RequestMessage, position: int) -> ClientToolResult:
    if message.tool_call_id is None:
        raise AdmissionError(
            "openai.invalid_tool_message",
            f"messages[{position}]: a tool message must name the call it answers (tool_call_id)",
            f"messages[{position}].tool_call_id",
        )
    return ClientToolResult(tool_call_id=message.tool_call_id, content=message.text(position) or "")


def _answered_calls(chat: ChatCompletionRequest, first_result: int) -> set[str]:
    """The call ids the trailing tool results may answer: those of the assistant message just
    before them."""
    before = chat.messages[first_result - 1] if first_result > 0 else None
    if before is None or before.role != "assistant" or not before.tool_calls:
        raise AdmissionError(
            "openai.orphan_tool_result",
            f"messages[{first_result}]: tool results must follow the assistant message whose tool "
            "calls they answer",
            f"messages[{first_result}]",
        )
    return {call.id for call in before.tool_calls}


def _current(chat: ChatCompletionRequest) -> tuple[str, list[ClientToolResult], int]:
    """The turn's input: the last user message, or the trailing run of tool results (a tool loop
    continues); and where the earlier messages end."""
    messages = chat.messages
    first = len(messages)
    while first > 0 and messages[first - 1].role == "tool":
        first -= 1
    last = len(messages) - 1
    if first <= last:
        results = [_tool_result(messages[i], i) for i in range(first, len(messages))]
        calls = _answered_calls(chat, first)
        for offset, result in enumerate(results):
            if result.tool_call_id not in calls:
                raise AdmissionError(
                    "openai.orphan_tool_result",
                    f"messages[{first + offset}]: tool_call_id {result.tool_call_id!r} answers no "
                    "call of the assistant message before it",
                    f"messages[{first + offset}].tool_call_id",
                )
        current = "\n\n".join(result.content for result in results)
        if not current.strip():
            raise AdmissionError(
                "admission.empty_message", "the tool results are empty", f"messages[{first}]"
            )
        return current, results, first
    if messages[last].role != "user":
        raise AdmissionError(
            "openai.last_message_not_user",
            f"messages[{last}] is a {messages[last].role!r} message; a turn is one user message "
            "(or the results of the tool calls before it), sent last",
            f"messages[{last}]",
        )
    current = messages[last].text(last) or ""
    if not current.strip():
        raise AdmissionError("admission.empty_message", "the last user message is empty", f"messages[{last}]")
    return current, [], last


def _split(chat: ChatCompletionRequest) -> _Split:
    current, tool_results, end = _current(chat)
    system: list[ClientMessage] = []
    history: list[HistoryMessage] = []
    for index, message in enumerate(chat.messages[:end]):
        text = message.text(index)
        if message.role in ("system", "developer") and text:
            system.append(ClientMessage(role="system", content=text, source="system"))
        elif message.role == "tool":
            result = _tool_result(message, index)
            run = history[-1] if history and history[-1].role == "tool" else None
            if run is None or run.position + len(run.tool_results) != index:  # not consecutive
                history.append(
                    HistoryMessage(position=index, role="tool", content="", tool_results=(result,))
                )
            else:
                history[-1] = replace(run, tool_results=(*run.tool_results, result))
        elif message.role == "assistant" and message.tool_calls:
            calls = _tool_calls(message, index)
            history.append(
                HistoryMessage(position=index, role="assistant", content=text or "", tool_calls=calls)
            )
        elif message.role in ("user", "assistant") and text:
            history.append(HistoryMessage(position=index, role=message.role, content=text))
        else:
            raise AdmissionError(
                "openai.unsupported_message",
                f"messages[{index}]: a {message.role!r} message cannot be recorded (earlier messages "
                "must be system, user or assistant text, assistant tool calls or tool results)",
                f"messages[{index}]",
            )
    return _Split(current=current, system=system, history=history, tool_results=tool_results)


def _current_message(split: _Split) -> HistoryMessage:
    """The turn's input as a message of its conversation's chain."""
    if split.tool_results:
        return HistoryMessage(position=-1, role="tool", content="", tool_results=tuple(split.tool_results))
    return HistoryMessage(position=-1, role="user", content=split.current)


def _client_messages(message: HistoryMessage) -> list[ClientMessage]:
    """An unmatched history message as client context (a run of tool results: one each)."""
    if message.role == "tool":
        for offset, result in enumerate(message.tool_results):
            if not result.content:  # client context holds no empty message: nothing to record
                position = message.position + offset
                raise AdmissionError(
                    "openai.unsupported_message",
                    f"messages[{position}]: an empty tool result that matches no recorded event "
                    "cannot be recorded as client context",
                    f"messages[{position}]",
                )
        return [
            ClientMessage(
                role="tool", content=r.content, tool_call_id=r.tool_call_id, source="unmatched_history"
            )
            for r in message.tool_results
        ]
    return [
        ClientMessage(
            role=message.role,
            content=message.content,
            tool_calls=message.tool_calls,
            source="unmatched_history",
        )
    ]


def _client_tools(chat: ChatCompletionRequest) -> list[ClientTool]:
    """The offered tools (none for ``tool_choice: "none"``: not offering them is how it is
    honoured on every vendor)."""
    if not chat.tools or chat.tool_choice == "none":
        return []
    tools: list[ClientTool] = []
    for index, requested in enumerate(chat.tools):
        function = requested.function
        try:
            client_tool = ClientTool(
                name=function.name,
                description=function.description or function.name,
                parameters=function.parameters or {"type": "object", "properties": {}},
                strict=function.strict,
            )
            client_tool.spec()  # the checks a prompt pack's tool passes (parameters of type object)
            tools.append(client_tool)
        except ValidationError as exc:
            raise AdmissionError(
                "openai.invalid_tool",
                f"tools[{index}] {function.name!r}: {exc.errors(include_url=False)[0].get('msg')} "
                "(names: 1 to 64 letters, digits, '_' or '-'; parameters: a JSON schema of type "
                "'object')",
                f"tools[{index}]",
            ) from exc
    return tools


def thread_from_header(value: str | None) -> str | None:
    """The thread a request's ``X-Turngate-Thread`` names: percent-encoded UTF-8, as responses
    send it (raw UTF-8 bytes, which arrive as Latin-1 text, are read as UTF-8 too)."""
    if not value:
        return None
    if not value.isascii():
        with contextlib.suppress(UnicodeError):  # Latin-1 text that is not UTF-8: as it is
            value = value.encode("latin-1").decode("utf-8")
    return decode_header_id(value)


def correlation_id_for(
    tenant_id: str | None, thread_id: str | None, idempotency_key: str, prefix: str = ID_PREFIX
) -> str:
    """The turn's correlation id (the response ``id``) for an idempotency key: a retried call
    names the same turn."""
    raw = "\x1f".join((tenant_id or "", thread_id or "", idempotency_key))
    return f"{prefix}{hashlib.sha256(raw.encode('utf-8')).hexdigest()[:32]}"


def thread_events(store: LedgerStore, thread_id: str, tenant_id: str | None) -> list[Event]:
    """Every event of the thread the caller may see, by index (paged: no cap)."""
    found: list[Event] = []
    while True:
        total, page = store.snapshot(
            offset=len(found), limit=MAX_PAGE, thread_id=thread_id, tenant_id=tenant_id
        )
        found += page
        if not page or len(found) >= total:
            return found


def plan_turn(
    chat: ChatCompletionRequest,
    headers: Mapping[str, str],
    settings: Settings,
    store: LedgerStore,
    tenant_id: str | None,
    id_prefix: str = ID_PREFIX,
) -> PlannedTurn:
    """The envelope for this request (blocking: reads the thread's events). ``id_prefix`` starts
    its turn id (another API's front door has its own: ``resp_``, ``msg_``)."""
    metadata = chat.metadata or {}
    named = thread_from_header(headers.get(THREAD_HEADER)) or metadata.get("thread_id")
    key = headers.get(IDEMPOTENCY_HEADER) or metadata.get("idempotency_key")
    split = _split(chat)
    tools = _client_tools(chat)
    options = request_options(chat)
    if split.system and settings.openai_client_system == "refuse":
        raise AdmissionError(
            "openai.system_message_refused",
            "this gateway does not accept client system messages (TURNGATE_OPENAI_CLIENT_SYSTEM=refuse)",
            "messages",
        )
    thread = named
    if thread is None:  # a stateless client: the thread its history continues, if any
        continued = continued_thread(store, tenant_id, split.history, id_prefix)
        thread = continued.thread_id if continued is not None else None
    if key is not None:
        correlation_id = correlation_id_for(tenant_id, named, key, id_prefix)
    else:
        chain = message_chain([*split.history, _current_message(split)])
        correlation_id = choose_turn_id(
            store, tenant_id, named, chain, retry=is_retry(headers), prefix=id_prefix
        )
    match = HistoryMatch(ref_digests=(), unmatched=tuple(split.history), last_turn_id=None)
    if thread and split.history:
        match = match_history(split.history, thread_events(store, thread, tenant_id))
    # Only a thread the client named refuses history it does not hold: a stateless client's
    # unmatched history starts a new thread, recorded as its client context.
    if match.unmatched and named and settings.openai_unmatched_history == "refuse":
        positions = ", ".join(str(m.position) for m in match.unmatched)
        raise AdmissionError(
            "openai.unmatched_history",
            f"messages [{positions}] match no recorded event of thread {named!r}; send only the "
            f"thread's recorded exchanges, or let the gateway record them as client context "
            "(TURNGATE_OPENAI_UNMATCHED_HISTORY=record)",
            "messages",
        )
    client_messages = [*split.system] + [c for m in match.unmatched for c in _client_messages(m)]
    inputs: dict[str, Any] = {}
    if client_messages or tools or split.tool_results or chat.temperature is not None or options:
        context: dict[str, Any] = {
            "source": CLIENT_CONTEXT_SOURCE,
            "messages": [m.model_dump(mode="json") for m in client_messages],
            "tools": [t.model_dump(mode="json") for t in tools],
        }
        # Only when sent: an intent without them keeps the bytes (and digest) it always had.
        if split.tool_results:
            context["tool_results"] = [r.model_dump(mode="json") for r in split.tool_results]
        if chat.temperature is not None:
            context["temperature"] = chat.temperature
        if options is not None:
            context[REQUEST_OPTIONS_KEY] = options.recorded()
        inputs[CLIENT_CONTEXT_KEY] = context
    max_tokens = chat.max_completion_tokens or chat.max_tokens
    thread_id = thread or correlation_id
    payload: dict[str, Any] = {
        "stream_id": STREAM_ID,
        "intent_type": "chat.message",
        "actor": chat.user or "user",
        "thread_id": thread_id,
        "turn_id": correlation_id,
        "parent_turn_id": match.last_turn_id,
        "requested_model_id": chat.model,
        "inputs": inputs,
        "declared_refs": [{"ref_type": "event", "ref_id": digest} for digest in match.ref_digests],
        "payload": {"message": split.current},
    }
    if max_tokens is not None:
        payload["budget"] = {"max_tokens": max_tokens}
    return PlannedTurn(
        envelope={"interface_version": 3, "correlation_id": correlation_id, "payload": payload},
        correlation_id=correlation_id,
        thread_id=thread_id,
        refs=len(match.ref_digests),
        client_messages=len(client_messages),
        tenant_id=tenant_id,
    )
