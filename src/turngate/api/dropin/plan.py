"""A translated request, planned by the Chat Completions planner.

A front door's translator turns its JSON body into a Chat Completions body (and may name the
thread the call continues); :func:`turngate.api.openai_compat.plan.plan_request` plans it as it
plans ``/v1/chat/completions`` (the same checks, history matching and envelope). The planned turn
is then given the front door's id prefix, its client-context source, and (for a call that
continues a recorded turn) that turn's history as declared refs.

Runs off the event loop like the Chat Completions planner: in a worker process, or on the bounded
thread pool for a ledger only this process can open.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from turngate.api.cpu_pool import in_cpu_process, in_cpu_thread, shareable_ledger, worker_ledger
from turngate.api.ingress import json_object
from turngate.api.openai_compat.plan import PLANNING_HEADERS, check_message_count, plan_request
from turngate.api.openai_compat.turn import THREAD_HEADER, PlannedTurn, thread_from_header
from turngate.api.openai_compat.wire import ChatCompletionRequest
from turngate.core.client_context import CLIENT_CONTEXT_KEY
from turngate.core.events import AdmissionError, Event
from turngate.core.header_values import encode_header_id
from turngate.ledger import LedgerStore
from turngate.security.principal import Principal
from turngate.settings import Settings

R = TypeVar("R")


@dataclass(frozen=True)
class Continuation:
    """The recorded turn a call continues: its thread, and the history it had (its INTENT's
    declared refs, then its INTENT and EXECUTION)."""

    thread_id: str
    turn_id: str
    refs: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class Translation:
    chat: dict[str, Any]  # a Chat Completions body
    thread_id: str | None = None  # the thread the request names in its own way (None: none)
    continues: Continuation | None = None
    #: Where each of ``chat["messages"]`` came from in the request (``input[2]``, ``system``):
    #: the shared checks' errors name those, not the translated list.
    origins: tuple[str, ...] = ()
    messages_field: str = "messages"  # the request's field the messages came from, as a whole


_MESSAGE_POSITION = re.compile(r"messages\[(\d+)\]")
_MESSAGE_POSITIONS = re.compile(r"messages \[(\d+(?:, \d+)*)\]")  # "messages [0, 2]"


def in_request_terms(exc: AdmissionError, translation: Translation) -> AdmissionError:
    """``exc`` (about the translated ``messages``) naming where each message came from."""
    origins = translation.origins

    def origin(found: re.Match[str]) -> str:
        position = int(found.group(1))
        return origins[position] if position < len(origins) else found.group(0)

    def listed(found: re.Match[str]) -> str:
        return ", ".join(
            origins[int(n)] if int(n) < len(origins) else f"messages[{n}]" for n in found.group(1).split(", ")
        )

    if not origins:
        return exc
    if exc.field == "messages":
        detail = _MESSAGE_POSITIONS.sub(listed, exc.detail)
        return AdmissionError(exc.reason_code, detail, translation.messages_field)
    field = _MESSAGE_POSITION.sub(origin, exc.field) if exc.field else exc.field
    return AdmissionError(exc.reason_code, _MESSAGE_POSITION.sub(origin, exc.detail), field)


@dataclass(frozen=True)
class Planned(Generic[R]):
    request: R  # the front door's validated request
    chat: ChatCompletionRequest
    turn: PlannedTurn


#: (the JSON body, the ledger, the caller's tenant) -> the validated request and its translation.
Translator = Callable[[Any, LedgerStore, "str | None"], tuple[R, Translation]]


def turn_of(store: LedgerStore, correlation_id: str, tenant_id: str | None) -> dict[str, Event]:
    """The recorded events of the caller's turn ``correlation_id``, by kind (empty: none)."""
    return {str(e.kind): e for e in store.by_correlation(correlation_id, tenant_id=tenant_id)}


def continuation_of(events: Mapping[str, Event]) -> Continuation | None:
    """What continuing this recorded turn means; None unless it has an answer (not denied, not
    failed)."""
    intent, execution = events.get("INTENT"), events.get("EXECUTION")
    if intent is None or execution is None or execution.payload.get("error"):
        return None
    earlier = intent.payload.get("declared_refs") or []
    own = [{"ref_type": "event", "ref_id": intent.digest}, {"ref_type": "event", "ref_id": execution.digest}]
    return Continuation(
        thread_id=intent.thread_id, turn_id=intent.turn_id, refs=(*[dict(r) for r in earlier], *own)
    )


def _finished_turn(turn: PlannedTurn, source: str, continues: Continuation | None) -> PlannedTurn:
    """``turn`` (planned with the front door's id prefix) with its client-context source,
    continuing ``continues``."""
    payload = dict(turn.envelope["payload"])
    inputs = dict(payload.get("inputs") or {})
    if CLIENT_CONTEXT_KEY in inputs:
        inputs[CLIENT_CONTEXT_KEY] = {**inputs[CLIENT_CONTEXT_KEY], "source": source}
        payload["inputs"] = inputs
    refs = list(payload.get("declared_refs") or [])
    if continues is not None:
        chain = [dict(r) for r in continues.refs]
        refs = chain + [r for r in refs if r not in chain]
        payload.update(declared_refs=refs, parent_turn_id=continues.turn_id)
    envelope = {**turn.envelope, "payload": payload}
    return replace(turn, envelope=envelope, refs=len(refs))


@dataclass(frozen=True)
class FrontDoor(Generic[R]):
    """One API translated into Chat Completions calls."""

    translate: Translator[R]
    prefix: str  # of its turn ids (``resp_``, ``msg_``)
    source: str  # its client context's ``source``
    items_field: str  # the request's list that becomes ``messages`` (``input``, ``messages``)


def _check_count(door: FrontDoor[R], data: Any, settings: Settings) -> None:
    """The message cap, on the request's own list, before anything walks it (as the Chat
    Completions planner checks its body); the translated list is checked again after."""
    items = data.get(door.items_field) if isinstance(data, dict) else None
    try:
        check_message_count({"messages": items}, settings.openai_max_messages)
    except AdmissionError as exc:
        detail = exc.detail.replace("messages has", f"{door.items_field} has", 1)
        raise AdmissionError(exc.reason_code, detail, door.items_field) from exc


def plan_translated(
    door: FrontDoor[R],
    data: Any,
    headers: Mapping[str, str],
    settings: Settings,
    store: LedgerStore,
    tenant_id: str | None,
) -> Planned[R]:
    """Translate ``data`` and plan it as a Chat Completions call (blocking: reads the ledger)."""
    _check_count(door, data, settings)
    request, translation = door.translate(data, store, tenant_id)
    wanted = dict(headers)
    if translation.thread_id is not None:
        named = thread_from_header(wanted.get(THREAD_HEADER))
        if named is not None and named != translation.thread_id:
            raise AdmissionError(
                "thread.conflict",
                f"the {THREAD_HEADER} header names thread {named!r}, the request continues "
                f"thread {translation.thread_id!r}",
                THREAD_HEADER,
            )
        wanted[THREAD_HEADER] = encode_header_id(translation.thread_id)
    try:
        # Ids are planned with the door's prefix: the turn ids looked up (a retry's, the
        # generations of a conversation, a stateless call's thread) are the ids it records.
        chat, turn = plan_request(translation.chat, wanted, settings, store, tenant_id, door.prefix)
    except AdmissionError as exc:
        raise in_request_terms(exc, translation) from exc
    return Planned(request, chat, _finished_turn(turn, door.source, translation.continues))


def _plan_body(
    door: FrontDoor[R],
    body: bytes,
    headers: dict[str, str],
    settings: Settings,
    store: LedgerStore | None,
    tenant_id: str | None,
) -> Planned[R]:
    ledger = store if store is not None else worker_ledger(settings.effective_ledger_url)
    return plan_translated(door, json_object(body), headers, settings, ledger, tenant_id)


async def plan_translated_call(
    door: FrontDoor[R],
    body: bytes,
    headers: Mapping[str, str],
    settings: Settings,
    store: LedgerStore,
    principal: Principal,
) -> Planned[R]:
    """:func:`plan_translated` for a raw body, off the event loop (as the Chat Completions
    planner runs: one call per key at a time in a worker process)."""
    wanted = {name: headers[name] for name in PLANNING_HEADERS if name in headers}
    tenant_id = principal.tenant_id
    if shareable_ledger(settings.effective_ledger_url):
        return await in_cpu_process(
            _plan_body, door, body, wanted, settings, None, tenant_id, key=principal.limit_key
        )
    return await in_cpu_thread(_plan_body, door, body, wanted, settings, store, tenant_id)
