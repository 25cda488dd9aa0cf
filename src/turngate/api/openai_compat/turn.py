"""An OpenAI Chat Completions request -> the intent envelope of one turn.

The last message is the turn's message (it must be a user message). Earlier user/assistant
messages that match recorded events of the thread become declared refs; the rest is refused or
recorded as client context (``TURNGATE_OPENAI_UNMATCHED_HISTORY``). System (and developer)
messages are recorded as client context and placed after the prompt pack's system prompt, or
refused (``TURNGATE_OPENAI_CLIENT_SYSTEM``). Function tools are recorded as client tools.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from turngate.api.openai_compat.history import HistoryMatch, HistoryMessage, match_history
from turngate.api.openai_compat.wire import ChatCompletionRequest
from turngate.core.client_context import CLIENT_CONTEXT_KEY, ClientMessage, ClientTool
from turngate.core.events import AdmissionError, Event
from turngate.ledger import LedgerStore
from turngate.ledger.store import MAX_PAGE
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

    @property
    def key(self) -> tuple[str, str, str]:
        return (STREAM_ID, self.thread_id, self.correlation_id)


@dataclass(frozen=True)
class _Split:
    current: str
    system: list[ClientMessage]
    history: list[HistoryMessage]


def _split(chat: ChatCompletionRequest) -> _Split:
    *earlier, last = chat.messages
    position = len(chat.messages) - 1
    if last.role != "user":
        raise AdmissionError(
            "openai.last_message_not_user",
            f"messages[{position}] is a {last.role!r} message; a turn is one user message, sent last",
            f"messages[{position}]",
        )
    current = last.text(position) or ""
    if not current.strip():
        raise AdmissionError(
            "admission.empty_message", "the last user message is empty", f"messages[{position}]"
        )
    system: list[ClientMessage] = []
    history: list[HistoryMessage] = []
    for index, message in enumerate(earlier):
        text = message.text(index)
        if message.role in ("system", "developer") and text:
            system.append(ClientMessage(role="system", content=text, source="system"))
        elif message.role in ("user", "assistant") and text and not message.tool_calls:
            history.append(HistoryMessage(position=index, role=message.role, content=text))
        else:
            raise AdmissionError(
                "openai.unsupported_message",
                f"messages[{index}]: a {message.role!r} message "
                f"{'with tool calls ' if message.tool_calls else ''}cannot be recorded "
                "(earlier messages must be system, user or assistant text)",
                f"messages[{index}]",
            )
    return _Split(current=current, system=system, history=history)


def _client_tools(chat: ChatCompletionRequest) -> list[ClientTool]:
    if chat.tool_choice not in (None, "auto", "none"):
        raise AdmissionError(
            "openai.unsupported_parameter", "tool_choice must be 'auto' or 'none'", "tool_choice"
        )
    if not chat.tools or chat.tool_choice == "none":
        return []
    tools: list[ClientTool] = []
    for index, tool in enumerate(chat.tools):
        function = tool.function
        try:
            client_tool = ClientTool(
                name=function.name,
                description=function.description or function.name,
                parameters=function.parameters or {"type": "object", "properties": {}},
            )
            client_tool.spec()  # the checks a prompt pack's tool passes (parameters of type object)
            tools.append(client_tool)
        except ValidationError as exc:
            raise AdmissionError(
                "openai.invalid_tool",
                f"tools[{index}] {function.name!r}: {exc.errors(include_url=False)[0].get('msg')} "
                "(names: lowercase letters, digits and '_', starting with a letter; parameters: "
                "a JSON schema of type 'object')",
                f"tools[{index}]",
            ) from exc
    return tools


def correlation_id_for(tenant_id: str | None, thread_id: str | None, idempotency_key: str | None) -> str:
    """The turn's correlation id (the response ``id``): derived from the idempotency key (so a
    retried call names the same turn), else fresh."""
    if idempotency_key is None:
        return f"chatcmpl-{uuid.uuid4().hex}"
    raw = "\x1f".join((tenant_id or "", thread_id or "", idempotency_key))
    return f"chatcmpl-{hashlib.sha256(raw.encode('utf-8')).hexdigest()[:32]}"


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
) -> PlannedTurn:
    """The envelope for this request (blocking: reads the thread's events)."""
    metadata = chat.metadata or {}
    thread = headers.get(THREAD_HEADER) or metadata.get("thread_id")
    key = headers.get(IDEMPOTENCY_HEADER) or metadata.get("idempotency_key")
    correlation_id = correlation_id_for(tenant_id, thread, key)
    split = _split(chat)
    tools = _client_tools(chat)
    if split.system and settings.openai_client_system == "refuse":
        raise AdmissionError(
            "openai.system_message_refused",
            "this gateway does not accept client system messages (TURNGATE_OPENAI_CLIENT_SYSTEM=refuse)",
            "messages",
        )
    match = HistoryMatch(ref_digests=(), unmatched=tuple(split.history), last_turn_id=None)
    if thread and split.history:
        match = match_history(split.history, thread_events(store, thread, tenant_id))
    if match.unmatched and settings.openai_unmatched_history == "refuse":
        positions = ", ".join(str(m.position) for m in match.unmatched)
        raise AdmissionError(
            "openai.unmatched_history",
            f"messages [{positions}] match no recorded event of "
            f"{'thread ' + repr(thread) if thread else 'a thread (none was named)'}; send only the "
            f"thread's recorded exchanges (name the thread with {THREAD_HEADER} or metadata.thread_id), "
            "or let the gateway record them as client context (TURNGATE_OPENAI_UNMATCHED_HISTORY=record)",
            "messages",
        )
    client_messages = [*split.system] + [
        ClientMessage(role=m.role, content=m.content, source="unmatched_history") for m in match.unmatched
    ]
    inputs: dict[str, Any] = {}
    if client_messages or tools:
        inputs[CLIENT_CONTEXT_KEY] = {
            "source": CLIENT_CONTEXT_SOURCE,
            "messages": [m.model_dump(mode="json") for m in client_messages],
            "tools": [t.model_dump(mode="json") for t in tools],
        }
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
    )
