"""The CPU-bound part of a ``/v1/chat/completions`` call, in one trip to a worker process
(:mod:`turngate.api.cpu_pool`): the body's parse, the cap on messages, validation, history
matching against the thread, the envelope.

The cap is checked on the parsed body before anything walks the messages: a call carries at most
``TURNGATE_OPENAI_MAX_MESSAGES`` of them (413 ``openai.too_many_messages`` otherwise), so what
one call costs is bounded by the cap and the body limit, and is paid in the worker, never on the
event loop every tenant shares.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turngate.api.cpu_pool import in_cpu_process, in_cpu_thread, shareable_ledger, worker_ledger
from turngate.api.ingress import json_object
from turngate.api.openai_compat.conversation import ID_PREFIX, RETRY_COUNT_HEADER
from turngate.api.openai_compat.turn import IDEMPOTENCY_HEADER, THREAD_HEADER, PlannedTurn, plan_turn
from turngate.api.openai_compat.wire import ChatCompletionRequest, parse_chat_request
from turngate.core.events import AdmissionError
from turngate.ledger import LedgerStore
from turngate.security.principal import Principal
from turngate.settings import Settings

TOO_MANY_MESSAGES = "openai.too_many_messages"
Planned = tuple[ChatCompletionRequest, PlannedTurn]


def check_message_count(data: Any, limit: int) -> None:
    """Refuse a body whose ``messages`` list is longer than ``limit`` (the rest of the shape is
    validated after)."""
    messages = data.get("messages") if isinstance(data, dict) else None
    if isinstance(messages, list) and len(messages) > limit:
        raise AdmissionError(
            TOO_MANY_MESSAGES,
            f"messages has {len(messages)} entries; a call may send at most {limit} "
            "(TURNGATE_OPENAI_MAX_MESSAGES): send the thread's recent exchanges, the earlier ones "
            "are recorded in the ledger",
            "messages",
        )


#: The headers planning reads (a front door translating another API passes the same).
PLANNING_HEADERS = (THREAD_HEADER, IDEMPOTENCY_HEADER, RETRY_COUNT_HEADER)


def plan_request(
    data: Any,
    headers: Mapping[str, str],
    settings: Settings,
    store: LedgerStore,
    tenant_id: str | None,
    id_prefix: str = ID_PREFIX,
) -> Planned:
    """The validated request and its turn (blocking: reads the thread's events)."""
    check_message_count(data, settings.openai_max_messages)
    chat = parse_chat_request(data)
    return chat, plan_turn(chat, headers, settings, store, tenant_id, id_prefix)


def _plan_body(
    body: bytes, headers: dict[str, str], settings: Settings, store: LedgerStore | None, tenant_id: str | None
) -> Planned:
    ledger = store if store is not None else worker_ledger(settings.effective_ledger_url)
    return plan_request(json_object(body), headers, settings, ledger, tenant_id)


async def plan_call(
    body: bytes,
    headers: Mapping[str, str],
    settings: Settings,
    store: LedgerStore,
    principal: Principal,
) -> Planned:
    """:func:`plan_request` for a raw body, off the event loop: in a worker process (one at a
    time per key), or (a ledger only this process can open) on the bounded thread pool."""
    wanted = {name: headers[name] for name in PLANNING_HEADERS if name in headers}
    tenant_id = principal.tenant_id
    if shareable_ledger(settings.effective_ledger_url):
        return await in_cpu_process(
            _plan_body, body, wanted, settings, None, tenant_id, key=principal.limit_key
        )
    return await in_cpu_thread(_plan_body, body, wanted, settings, store, tenant_id)
