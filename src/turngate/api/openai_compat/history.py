"""Earlier messages of an OpenAI ``messages`` list, matched to the thread's recorded events.

A user message whose text is an earlier INTENT's message, or an assistant message whose text is
an earlier EXECUTION's answer, becomes a declared ref to that event (by its event digest). The
match is by the sha256 of the text (for offloaded texts, the artifact's sha256), in order: each
message is looked for after the event the previous match found, so one recorded exchange is
never matched twice. What matches nothing is returned as unmatched.

Pure: the caller fetches the thread's events.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from turngate.core.events import Event, EventKind
from turngate.core.policy import intent_message


@dataclass(frozen=True)
class HistoryMessage:
    position: int  # index in the request's ``messages``
    role: Literal["user", "assistant"]
    content: str


@dataclass(frozen=True)
class HistoryMatch:
    ref_digests: tuple[str, ...]  # event digests, in the order matched
    unmatched: tuple[HistoryMessage, ...]
    last_turn_id: str | None  # the turn of the last matched event


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _pointer_hex(pointer: Any) -> str | None:
    if not isinstance(pointer, Mapping) or not isinstance(pointer.get("sha256"), str):
        return None
    return str(pointer["sha256"]).removeprefix("sha256:")


def _text_digests(event: Event) -> set[str]:
    """The sha256 (hex) of the text this event stands for: a user's message or an answer."""
    found: set[str] = set()
    if event.kind == EventKind.INTENT:
        body = event.payload.get("payload")
        message = intent_message(event)
        if isinstance(body, Mapping) and body.get("message_truncated"):
            pointer = _pointer_hex(body.get("message_artifact"))
            if pointer:
                found.add(pointer)
        elif message:
            found.add(_sha256_hex(message))
    elif event.kind == EventKind.EXECUTION and not event.payload.get("error"):
        pointer = _pointer_hex(event.payload.get("output_artifact"))
        text = event.payload.get("output_text")
        if pointer and event.payload.get("output_truncated"):
            found.add(pointer)
        elif isinstance(text, str) and text:
            found.add(_sha256_hex(text))
    return found


_KIND_FOR_ROLE = {"user": EventKind.INTENT, "assistant": EventKind.EXECUTION}


def match_history(history: Sequence[HistoryMessage], events: Sequence[Event]) -> HistoryMatch:
    """Match ``history`` (in request order) against the thread's ``events`` (by index)."""
    ordered = sorted(events, key=lambda event: event.index)
    digests = [_text_digests(event) for event in ordered]
    cursor = 0
    refs: list[str] = []
    unmatched: list[HistoryMessage] = []
    last_turn: str | None = None
    for message in history:
        wanted = _sha256_hex(message.content)
        kind = _KIND_FOR_ROLE[message.role]
        hit = next(
            (i for i in range(cursor, len(ordered)) if ordered[i].kind == kind and wanted in digests[i]),
            None,
        )
        if hit is None:
            unmatched.append(message)
            continue
        refs.append(ordered[hit].digest)
        last_turn = ordered[hit].turn_id
        cursor = hit + 1
    return HistoryMatch(ref_digests=tuple(refs), unmatched=tuple(unmatched), last_turn_id=last_turn)
