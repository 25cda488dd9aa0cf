"""Prompt assembly (first cut): system prompt + resolved context + the current user message.

Order: the optional system prompt, then the referenced turns in event-index order (an INTENT
becomes a ``user`` message with its message, an EXECUTION an ``assistant`` message with its
``output_text``), then the current user message. Under a token budget the oldest turns are
dropped first, a turn's INTENT and EXECUTION together (prompt assembly); the system prompt and the
current message are never trimmed. Every item lands in the inclusion or the exclusion log
(context observability).

A referenced message or answer that the gateway offloaded (over the inline text limit) is in the
event as a preview plus the pointer to its whole text: the message carries the preview, the
assembly names the pointer in ``message_artifacts`` (the provider activity loads the whole text),
and the budget counts the whole text (the preview's estimate scaled by the stored size).

A tool loop (``tool_messages``): a referenced EXECUTION that made tool calls becomes an assistant
message carrying them, a referenced INTENT that answered with tool results one tool message per
result, and a turn whose input is tool results (``tool_results``) ends with those tool messages
instead of a user message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from turngate.core.canonical import canonical_bytes, digest
from turngate.core.client_context import (
    ClientContext,
    ClientMessage,
    ClientToolCall,
    ClientToolResult,
    recorded_tool_calls,
    tool_results_of,
)
from turngate.core.events import Event, EventKind
from turngate.core.external import EXTERNAL_PREAMBLE, ExternalItem, external_message
from turngate.core.manifest import ExclusionEntry, InclusionEntry, ItemType
from turngate.core.messages import ChatMessage, ToolCallChunk
from turngate.core.policy import intent_message
from turngate.core.refs import Resolution
from turngate.core.system_context import CHAT_HISTORY, SYSTEM_CONTEXT, PromptShape, system_context_messages

COMPILER_VERSION = "turngate.assembly.1"
DEFAULT_BUDGET_TOKENS = 100_000


def chars_div_3(text: str) -> int:
    """Token estimate: ceil(len(text) / 3) (the prompt-assembly pipeline: ~3 chars per token)."""
    return -(-len(text) // 3)


class Assembly(BaseModel):
    """An assembled prompt with its inclusion/exclusion logs and prefix fingerprint."""

    model_config = ConfigDict(frozen=True)

    messages: list[ChatMessage]
    included: list[InclusionEntry]
    excluded: list[ExclusionEntry]
    estimated_tokens: int
    budget_tokens: int
    fits: bool
    prefix_hash: str
    prefix_length: int
    compiler_version: str = COMPILER_VERSION
    # message index -> pointer (JSON) to the whole text of an offloaded message or answer
    message_artifacts: dict[int, dict[str, Any]] = {}


@dataclass(frozen=True)
class _Item:
    event: Event
    messages: tuple[ChatMessage, ...]
    item_type: ItemType
    tokens: int
    pointer: dict[str, Any] | None = None


def item_type_for_kind(kind: str) -> ItemType:
    if kind == EventKind.INTENT:
        return "user_input"
    if kind == EventKind.EXECUTION:
        return "memory"
    return "policy"


def _content(event: Event) -> str | None:
    if event.kind == EventKind.INTENT:
        text = intent_message(event)
    elif event.kind == EventKind.EXECUTION:
        raw = event.payload.get("output_text")
        text = raw if isinstance(raw, str) else None
    else:
        text = None
    return text if text else None


def offloaded_text_pointer(event: Event) -> dict[str, Any] | None:
    """The pointer to an event's whole text when the gateway stored it as an artifact and kept a
    preview: an INTENT's ``message_artifact`` (with ``message_truncated``), an EXECUTION's
    ``output_artifact`` (with ``output_truncated``)."""
    if event.kind == EventKind.INTENT:
        body = event.payload.get("payload")
        holder: Mapping[str, Any] = body if isinstance(body, Mapping) else {}
        pointer, truncated = holder.get("message_artifact"), holder.get("message_truncated")
    elif event.kind == EventKind.EXECUTION:
        pointer, truncated = event.payload.get("output_artifact"), event.payload.get("output_truncated")
    else:
        return None
    if truncated is not True or not isinstance(pointer, Mapping):
        return None
    size = pointer.get("size_bytes")
    return dict(pointer) if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None


def _calls(calls: Sequence[ClientToolCall]) -> tuple[ToolCallChunk, ...]:
    return tuple(
        ToolCallChunk(id=call.id, name=call.name, arguments=json.dumps(call.arguments, ensure_ascii=False))
        for call in calls
    )


def _tool_messages(results: Sequence[ClientToolResult]) -> tuple[ChatMessage, ...]:
    return tuple(
        ChatMessage(role="tool", content=result.content, tool_call_id=result.tool_call_id)
        for result in results
    )


def _ref_messages(event: Event, text: str | None, tool_messages: bool) -> tuple[ChatMessage, ...]:
    """What a referenced event says in the prompt (nothing: it has no prompt content)."""
    if tool_messages and event.kind == EventKind.INTENT:
        results = tool_results_of(event.payload)
        if results:
            return _tool_messages(results)
    if tool_messages and event.kind == EventKind.EXECUTION and not event.payload.get("error"):
        calls = recorded_tool_calls(event.payload)
        if calls:
            return (ChatMessage(role="assistant", content=text or "", tool_calls=_calls(calls)),)
    if text is None:
        return ()
    return (ChatMessage(role="user" if event.kind == EventKind.INTENT else "assistant", content=text),)


def uses_tool_messages(resolution: Resolution | None, client: ClientContext | None) -> bool:
    """Whether this turn's prompt has tool-loop messages: tool results as its input, tool calls or
    results in the client's messages, or referenced events that made calls or answered them."""
    if client is not None and (
        client.tool_results or any(m.tool_calls or m.tool_call_id for m in client.messages)
    ):
        return True
    if resolution is None:
        return False
    return any(
        (event.kind == EventKind.EXECUTION and recorded_tool_calls(event.payload))
        or (event.kind == EventKind.INTENT and tool_results_of(event.payload))
        for event in (*resolution.governance_events, *resolution.execution_events)
    )


def client_chat_message(message: ClientMessage) -> ChatMessage:
    """A client context message as the prompt sends it."""
    return ChatMessage(
        role=message.role,
        content=message.content,
        tool_calls=_calls(message.tool_calls),
        tool_call_id=message.tool_call_id,
    )


def _whole_text_tokens(preview_tokens: int, preview: str, pointer: dict[str, Any] | None) -> int:
    """The estimate of an offloaded text: the preview's, scaled by stored size / preview size."""
    if pointer is None:
        return preview_tokens
    shown = max(len(preview.encode("utf-8")), 1)
    return max(preview_tokens, -(-preview_tokens * int(pointer["size_bytes"]) // shown))


def assemble(
    system_prompt: str | None,
    resolution: Resolution,
    user_message: str,
    *,
    budget_tokens: int = DEFAULT_BUDGET_TOKENS,
    estimator: Callable[[str], int] = chars_div_3,
    current: Event | None = None,
    external: Sequence[ExternalItem] = (),
    client_messages: Sequence[ClientMessage] = (),
    tool_definitions: Sequence[Mapping[str, Any]] = (),
    tool_results: Sequence[ClientToolResult] = (),
    tool_messages: bool = False,
    shape: PromptShape = CHAT_HISTORY,
) -> Assembly:
    """Assemble the messages for one turn. Deterministic for equal inputs.

    ``current`` (the turn's INTENT event) only names the current message in the inclusion log;
    without it the message's content digest is used. ``external`` (retrieved chunks, fetched
    handles, in rank order) become one user message just before the current one; over budget
    they go after the history, last-ranked first. ``client_messages`` (the client's own system
    message and unmatched history, recorded in the INTENT) follow the system prompt, in the order
    sent, and are never trimmed. ``tool_definitions`` (the tools offered this turn) are sent too,
    so they count against the budget like the system prompt (their canonical JSON, estimated),
    and like it they are never trimmed. ``tool_results`` (with ``tool_messages``): the turn's
    input is the results of the referenced tool calls, sent as tool messages in place of
    ``user_message``; ``tool_messages`` also renders referenced tool calls and results as such
    (without it, turns recorded before tool loops keep their assembly). ``shape``
    ``system_context``: the same content, kept and trimmed alike, sent as one system message and
    the user message (:mod:`turngate.core.system_context`).
    """
    if budget_tokens < 1:
        raise ValueError("budget_tokens must be at least 1")

    def estimate(text: str) -> int:
        tokens = estimator(text)
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"the token estimator must return a non-negative int, got {tokens!r}")
        return tokens

    events = {event.digest: event for event in (*resolution.governance_events, *resolution.execution_events)}
    items: list[_Item] = []
    excluded: list[ExclusionEntry] = []
    for ref in resolution.resolved_refs:
        event = events.get(ref.event_digest)
        text = _content(event) if event is not None else None
        rendered = _ref_messages(event, text, tool_messages) if event is not None else ()
        if event is None or not rendered:
            excluded.append(
                ExclusionEntry(
                    item_id=ref.event_digest,
                    item_type=item_type_for_kind(ref.event_kind),
                    source_ref=ref.event_index,
                    excluded_reason="no_prompt_content",
                )
            )
            continue
        pointer = offloaded_text_pointer(event) if text is not None and rendered[0].content == text else None
        tokens = sum(estimate(message.content) for message in rendered)
        tokens += sum(estimate(call.arguments) for message in rendered for call in message.tool_calls)
        items.append(
            _Item(
                event=event,
                messages=rendered,
                item_type=item_type_for_kind(event.kind),
                tokens=_whole_text_tokens(tokens, text, pointer) if text is not None else tokens,
                pointer=pointer,
            )
        )
    for dropped in resolution.dropped_refs:
        excluded.append(
            ExclusionEntry(
                item_id=dropped.event_digest,
                item_type=item_type_for_kind(dropped.event_kind),
                source_ref=dropped.event_index,
                excluded_reason="not_admitted_for_execution",
            )
        )

    # A turn (same thread and turn_id) is one unit; units in order of their first event.
    units: dict[tuple[str, str], list[_Item]] = {}
    for item in sorted(items, key=lambda it: (it.event.index, it.event.digest)):
        units.setdefault((item.event.thread_id, item.event.turn_id), []).append(item)
    ordered_units = list(units.values())

    fixed = estimate(user_message) + (estimate(system_prompt) if system_prompt else 0)
    fixed += sum(estimate(message.content) for message in client_messages)
    if tool_definitions:
        fixed += estimate(canonical_bytes(list(tool_definitions)).decode("utf-8"))
    outside = list(external)
    outside_tokens = [estimate(external_message([item])) - estimate(EXTERNAL_PREAMBLE) for item in outside]
    if outside:
        fixed += estimate(EXTERNAL_PREAMBLE)
    total = fixed + sum(item.tokens for unit in ordered_units for item in unit) + sum(outside_tokens)
    while total > budget_tokens and ordered_units:
        oldest = ordered_units.pop(0)
        total -= sum(item.tokens for item in oldest)
        for item in oldest:
            excluded.append(
                ExclusionEntry(
                    item_id=item.event.digest,
                    item_type=item.item_type,
                    source_ref=item.event.index,
                    excluded_reason="budget_limit",
                )
            )
    dropped_outside: list[ExternalItem] = []
    while total > budget_tokens and outside:
        dropped_outside.insert(0, outside.pop())
        total -= outside_tokens.pop()
    if not outside and dropped_outside:
        total -= estimate(EXTERNAL_PREAMBLE)

    kept = [item for unit in ordered_units for item in unit]
    kept.sort(key=lambda it: (it.event.index, it.event.digest))
    messages: list[ChatMessage] = []
    if system_prompt:
        messages.append(ChatMessage(role="system", content=system_prompt))
    messages += [client_chat_message(message) for message in client_messages]
    artifacts: dict[int, dict[str, Any]] = {}
    for item in kept:
        if item.pointer is not None:  # an offloaded text is one message
            artifacts[len(messages)] = item.pointer
        messages += item.messages
    if outside:
        messages.append(ChatMessage(role="user", content=external_message(outside)))
    turn_input = (
        list(_tool_messages(tool_results))
        if tool_messages and tool_results
        else [ChatMessage(role="user", content=user_message)]
    )
    if shape == SYSTEM_CONTEXT:
        first = 1 if system_prompt else 0  # the history: after the system prompt, before external
        history = messages[first : len(messages) - (1 if outside else 0)]
        messages = system_context_messages(
            system_prompt,
            [(message, artifacts.get(first + position)) for position, message in enumerate(history)],
            external_message(outside) if outside else None,
            turn_input,
        )
        artifacts = {}  # previews inline: no message is one whole offloaded text
        prefix = [message.model_dump(mode="json") for message in messages[:-1]]
    else:
        prefix = [message.model_dump(mode="json") for message in messages]
        messages += turn_input

    included = [
        InclusionEntry(
            item_id=digest(message.model_dump(mode="json")),
            item_type="user_input",
            source_ref=f"client_context.messages[{position}]",
            included_reason=f"client_{message.source}",
        )
        for position, message in enumerate(client_messages)
    ]
    included += [
        InclusionEntry(
            item_id=item.event.digest,
            item_type=item.item_type,
            source_ref=item.event.index,
            included_reason="declared_ref",
        )
        for item in kept
    ]
    included += [
        InclusionEntry(
            item_id=item.item_id,
            item_type="evidence",
            source_ref=item.source_ref,
            included_reason=item.included_reason,
        )
        for item in outside
    ]
    excluded += [
        ExclusionEntry(
            item_id=item.item_id,
            item_type="evidence",
            source_ref=item.source_ref,
            excluded_reason="budget_limit",
        )
        for item in dropped_outside
    ]
    if tool_messages:  # this turn's tool results, sent in place of a user message
        included += [
            InclusionEntry(
                item_id=digest(result.model_dump(mode="json")),
                item_type="tool_output",
                source_ref=f"client_context.tool_results[{position}]",
                included_reason="client_tool_result",
            )
            for position, result in enumerate(tool_results)
        ]
    included.append(
        InclusionEntry(
            item_id=current.digest if current is not None else digest(user_message),
            item_type="user_input",
            source_ref=current.index if current is not None else "current_intent",
            included_reason="current_intent",
        )
    )
    # ledger items by event index, then external ones by their source (str sorts after int)
    excluded.sort(
        key=lambda entry: (isinstance(entry.source_ref, str), str(entry.source_ref).zfill(20), entry.item_id)
    )
    return Assembly(
        messages=messages,
        included=included,
        excluded=excluded,
        estimated_tokens=total,
        budget_tokens=budget_tokens,
        fits=total <= budget_tokens,
        prefix_hash=digest(prefix),
        prefix_length=len(canonical_bytes(prefix).decode("utf-8")),
        message_artifacts=artifacts,
    )
