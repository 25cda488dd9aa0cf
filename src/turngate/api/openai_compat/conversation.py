"""Which turn a Chat Completions call is, and which thread it continues, without any header.

A call's turn id is derived from its content: the caller's tenant, the thread it named (none
for a stateless call) and the *chain* of its messages (a digest over each non-system message's
fingerprint, in order, the whitespace SDKs add around texts ignored). So:

- a **retry** of the same request (the SDK's ``x-stainless-retry-count`` above 0) computes the
  same id and finds the turn the first attempt recorded: no second turn, no second provider
  call; ``Idempotency-Key`` does the same by key (:func:`~turngate.api.openai_compat.turn.
  correlation_id_for`);
- the same messages sent again, **not** as a retry, are a new turn: the id gets the next free
  *generation* (``<chain>#2``, ``#3``, ...; past :data:`MAX_GENERATIONS` a fresh random id);
- a **stateless** client (no thread named) that sends a conversation back continues it: its
  messages up to the last assistant answer are exactly the messages of the call that got that
  answer, so their chain names that call's turn, whose EXECUTION must be that answer; its
  thread is the thread this call continues.

Blocking (reads the ledger): runs where :func:`~turngate.api.openai_compat.plan.plan_request`
runs, off the event loop.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from turngate.api.openai_compat.history import HistoryMessage, event_fingerprint
from turngate.core.events import Event, EventKind
from turngate.ledger import LedgerStore

#: The header the OpenAI and Anthropic SDKs send with each attempt (0 first, then 1, 2, ...).
RETRY_COUNT_HEADER = "x-stainless-retry-count"
#: Calls with the same messages (not retries) that get an id findable from their content;
#: later ones get a random id (their conversation is then not found by a stateless client).
MAX_GENERATIONS = 8
ID_PREFIX = "chatcmpl-"


def is_retry(headers: Mapping[str, str]) -> bool:
    """Whether the SDK says this attempt repeats an earlier one of the same request."""
    value = headers.get(RETRY_COUNT_HEADER)
    try:
        return value is not None and int(value) > 0
    except ValueError:
        return False


def message_chain(messages: Sequence[HistoryMessage]) -> str:
    """The digest of a conversation's messages, in order (each by its best fingerprint)."""
    chain = hashlib.sha256(b"openai-chain-v1")
    for message in messages:
        chain.update(f"\x1f{message.role}\x1e{message.fingerprint()}".encode())
    return chain.hexdigest()


def turn_id_for(
    tenant_id: str | None, thread_id: str | None, chain: str, generation: int, prefix: str = ID_PREFIX
) -> str:
    """The id of the ``generation``-th call with this chain, in this tenant and thread (``prefix``:
    the front door's, so the ids looked up are the ids recorded)."""
    raw = "\x1f".join((tenant_id or "", thread_id or "", chain, str(generation)))
    return prefix + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]


def _recorded(store: LedgerStore, correlation_id: str, tenant_id: str | None) -> dict[str, Event]:
    return {str(event.kind): event for event in store.by_correlation(correlation_id, tenant_id=tenant_id)}


def choose_turn_id(
    store: LedgerStore,
    tenant_id: str | None,
    thread_id: str | None,
    chain: str,
    *,
    retry: bool,
    prefix: str = ID_PREFIX,
) -> str:
    """A new call's turn id: the first generation not recorded yet; a retry's, the last one
    recorded (its first attempt's)."""
    previous: str | None = None
    for generation in range(1, MAX_GENERATIONS + 1):
        candidate = turn_id_for(tenant_id, thread_id, chain, generation, prefix)
        if not store.by_correlation(candidate, tenant_id=tenant_id):
            return previous if retry and previous is not None else candidate
        previous = candidate
    return previous if retry and previous is not None else f"{prefix}{uuid.uuid4().hex}"


@dataclass(frozen=True)
class ContinuedThread:
    thread_id: str
    turn_id: str  # the turn whose answer the call sent back


def continued_thread(
    store: LedgerStore, tenant_id: str | None, earlier: Sequence[HistoryMessage], prefix: str = ID_PREFIX
) -> ContinuedThread | None:
    """The thread a stateless call continues: ``earlier`` (its messages before the current one)
    ends with an answer, and the messages before that answer are a recorded call of this tenant
    whose EXECUTION is that answer (the latest such call)."""
    if not earlier or earlier[-1].role != "assistant":
        return None
    chain = message_chain(earlier[:-1])
    answer = set(earlier[-1].fingerprints())
    found: ContinuedThread | None = None
    for generation in range(1, MAX_GENERATIONS + 1):
        recorded = _recorded(store, turn_id_for(tenant_id, None, chain, generation, prefix), tenant_id)
        if not recorded:
            break
        execution = recorded.get(str(EventKind.EXECUTION))
        if execution is not None and event_fingerprint(execution) in answer:
            found = ContinuedThread(thread_id=execution.thread_id, turn_id=execution.turn_id)
    return found
