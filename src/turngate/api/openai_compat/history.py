"""Earlier messages of an OpenAI ``messages`` list, matched to the thread's recorded events.

A user message whose text is an earlier INTENT's message, or an assistant message whose text is
an earlier EXECUTION's answer, becomes a declared ref to that event (by its event digest). The
match is by the sha256 of the text without leading and trailing whitespace (for offloaded texts,
the artifact's sha256 of the text as recorded), in order: each
message is looked for after the event the previous match found, so one recorded exchange is
never matched twice. What matches nothing is returned as unmatched.

The thread's events are indexed once per request (fingerprint -> their positions, in order), so
a message is found by one dict lookup and a binary search: the work grows with messages plus
events, never with their product (a long history on a long thread stays cheap).

A tool loop matches too: an assistant message with tool calls matches the EXECUTION that
recorded exactly those calls (ids, names, arguments) and that text; a run of consecutive tool
messages matches the INTENT that recorded exactly those results (``client_context.tool_results``).

Pure: the caller fetches the thread's events.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from turngate.core.canonical import digest
from turngate.core.client_context import (
    ClientToolCall,
    ClientToolResult,
    recorded_tool_calls,
    tool_results_of,
)
from turngate.core.events import Event, EventKind
from turngate.core.policy import intent_message


@dataclass(frozen=True)
class HistoryMessage:
    position: int  # index in the request's ``messages`` (of the first, for a run of tool results)
    role: Literal["user", "assistant", "tool"]
    content: str
    tool_calls: tuple[ClientToolCall, ...] = ()  # an assistant message's calls
    tool_results: tuple[ClientToolResult, ...] = ()  # a run of tool messages

    def fingerprints(self) -> tuple[str, ...]:
        """What this message may stand for, best first: its text without the whitespace SDKs add
        around it, then (for a text that was offloaded whole) exactly as sent."""
        if self.role == "tool":
            return (_results_fingerprint(self.tool_results),)
        texts = dict.fromkeys((_sha256_hex(normalized(self.content)), _sha256_hex(self.content)))
        if self.tool_calls:
            return tuple(_calls_fingerprint(text, self.tool_calls) for text in texts)
        return tuple(texts)

    def fingerprint(self) -> str:
        return self.fingerprints()[0]


@dataclass(frozen=True)
class HistoryMatch:
    ref_digests: tuple[str, ...]  # event digests, in the order matched
    unmatched: tuple[HistoryMessage, ...]
    last_turn_id: str | None  # the turn of the last matched event


def normalized(text: str) -> str:
    """A text as history matching compares it: without leading and trailing whitespace (SDKs and
    frameworks add a trailing newline, or strip one, when they send an answer back)."""
    return text.strip()


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _calls_fingerprint(text_sha256: str, calls: Sequence[ClientToolCall]) -> str:
    return "calls:" + digest({"text": text_sha256, "calls": [call.model_dump(mode="json") for call in calls]})


def _results_fingerprint(results: Sequence[ClientToolResult]) -> str:
    return "results:" + digest([result.model_dump(mode="json") for result in results])


def _pointer_hex(pointer: Any) -> str | None:
    if not isinstance(pointer, Mapping) or not isinstance(pointer.get("sha256"), str):
        return None
    return str(pointer["sha256"]).removeprefix("sha256:")


def _intent_fingerprint(event: Event) -> str | None:
    results = tool_results_of(event.payload)
    if results:
        return _results_fingerprint(results)
    body = event.payload.get("payload")
    if isinstance(body, Mapping) and body.get("message_truncated"):
        return _pointer_hex(body.get("message_artifact"))
    message = intent_message(event)
    return _sha256_hex(normalized(message)) if message else None


def _execution_fingerprint(event: Event) -> str | None:
    if event.payload.get("error"):
        return None
    pointer = _pointer_hex(event.payload.get("output_artifact"))
    text = event.payload.get("output_text")
    text_hex = pointer if pointer and event.payload.get("output_truncated") else None
    if text_hex is None and isinstance(text, str):
        text_hex = _sha256_hex(normalized(text))
    calls = recorded_tool_calls(event.payload)
    if calls and text_hex is not None:
        return _calls_fingerprint(text_hex, calls)
    return text_hex if text else None


def event_fingerprint(event: Event) -> str | None:
    """What this event stands for in a ``messages`` list: a user's message, an answer, tool calls
    or tool results."""
    if event.kind == EventKind.INTENT:
        return _intent_fingerprint(event)
    if event.kind == EventKind.EXECUTION:
        return _execution_fingerprint(event)
    return None


_KIND_FOR_ROLE = {"user": EventKind.INTENT, "tool": EventKind.INTENT, "assistant": EventKind.EXECUTION}


def _index(ordered: Sequence[Event]) -> dict[tuple[EventKind, str], list[int]]:
    """(kind, fingerprint) -> the positions in ``ordered`` of the events it stands for, ascending."""
    index: dict[tuple[EventKind, str], list[int]] = defaultdict(list)
    for position, event in enumerate(ordered):
        fingerprint = event_fingerprint(event)
        if fingerprint is not None:
            index[(event.kind, fingerprint)].append(position)
    return index


def match_history(history: Sequence[HistoryMessage], events: Sequence[Event]) -> HistoryMatch:
    """Match ``history`` (in request order) against the thread's ``events`` (by index)."""
    ordered = sorted(events, key=lambda event: event.index)
    index = _index(ordered)
    cursor = 0
    refs: list[str] = []
    unmatched: list[HistoryMessage] = []
    last_turn: str | None = None
    for message in history:
        hits = []
        for fingerprint in message.fingerprints():
            positions = index.get((_KIND_FOR_ROLE[message.role], fingerprint), [])
            found = bisect_left(positions, cursor)  # the first such event after the last match
            if found < len(positions):
                hits.append(positions[found])
        if not hits:
            unmatched.append(message)
            continue
        hit = min(hits)
        refs.append(ordered[hit].digest)
        last_turn = ordered[hit].turn_id
        cursor = hit + 1
    return HistoryMatch(ref_digests=tuple(refs), unmatched=tuple(unmatched), last_turn_id=last_turn)
