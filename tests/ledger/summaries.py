"""A full recomputation of the read summaries from the events, independent of the store's code,
and a ledger with every case the summaries distinguish (for the summary and paging tests)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from tests.ledger.helpers import draft
from turngate.core.events import Event, EventDraft, EventKind
from turngate.ledger import LedgerStore
from turngate.ledger.rows import (
    event_from_row,
)
from turngate.ledger.schema import (
    events,
    index_column,
    ledger_counts,
    thread_actors,
    thread_search,
    thread_summary,
)


def all_events(store: LedgerStore) -> list[Event]:
    with store.read_connection() as conn:
        return [event_from_row(row) for row in conn.execute(select(events).order_by(index_column)).mappings()]


def recompute(store: LedgerStore) -> dict[str, Any]:
    """The summary tables as a grouped pass over every event would fill them (and the search
    table: every thread key once)."""
    threads: dict[tuple[str, str], dict[str, Any]] = {}
    actors: set[tuple[str, str, str]] = set()
    counts: dict[tuple[str, str, str], int] = {}
    for event in all_events(store):
        tenant = event.tenant_id or ""
        row = threads.setdefault(
            (tenant, event.thread_id),
            {"events": 0, "turns": 0, "allowed": 0, "denied": 0, "errors": 0, "executed": 0}
            | {"first_index": event.index, "first_at": event.created_at},
        )
        row["events"] += 1
        row["last_index"], row["last_at"] = event.index, event.created_at
        if event.kind == EventKind.INTENT:
            row["turns"] += 1
        if event.kind == EventKind.DECISION:
            row["allowed"] += event.payload.get("decision") == "ALLOW"
            row["denied"] += event.payload.get("decision") == "DENY"
        if event.kind == EventKind.EXECUTION:
            row["executed"] += 1
            row["errors"] += isinstance(event.payload.get("error"), dict)
        actors.add((tenant, event.thread_id, event.actor))
        counts[(tenant, event.stream_id, event.lane)] = (
            counts.get((tenant, event.stream_id, event.lane), 0) + 1
        )
    return {"threads": threads, "actors": actors, "counts": counts, "search": set(threads)}


def stored(store: LedgerStore) -> dict[str, Any]:
    """The three summary tables as the store keeps them."""
    with store.read_connection() as conn:
        threads = {
            (row["tenant_key"], row["thread_id"]): {
                name: row[name] for name in row if name not in ("tenant_key", "thread_id")
            }
            for row in conn.execute(select(thread_summary)).mappings()
        }
        actors = {(r.tenant_key, r.thread_id, r.actor) for r in conn.execute(select(thread_actors))}
        counts = {(r.tenant_key, r.stream_id, r.lane): r.events for r in conn.execute(select(ledger_counts))}
        search = [(r.tenant_key, r.thread_id) for r in conn.execute(select(thread_search))]
    assert len(search) == len(set(search)), "a thread id indexed twice for the search"
    return {"threads": threads, "actors": actors, "counts": counts, "search": set(search)}


def _tenanted(d: EventDraft, tenant: str | None, actor: str) -> EventDraft:
    return d.model_copy(update={"tenant_id": tenant, "actor": actor})


def turn_drafts(
    n: int,
    *,
    thread: str,
    tenant: str | None = None,
    actor: str = "user",
    stream: str = "default",
    lane: str = "user_chat",
    outcome: str = "ALLOW",
) -> list[EventDraft]:
    """One turn's events: INTENT, DECISION (ALLOW / DENY / none for ``pending``) and, when
    allowed, an EXECUTION (``outcome`` ``error``: with an error object)."""
    cid = f"{thread}-{tenant}-{n}"
    common: dict[str, Any] = {"thread_id": thread, "stream_id": stream, "lane": lane}
    out = [_tenanted(draft(cid, EventKind.INTENT, **common), tenant, actor)]
    if outcome == "pending":
        return out
    verdict = "DENY" if outcome == "DENY" else "ALLOW"
    # a nested "decision" must not be mistaken for the turn's verdict
    decision = {"decision": verdict, "policy": {"decision": "ALLOW" if verdict == "DENY" else "DENY"}}
    out.append(_tenanted(draft(cid, EventKind.DECISION, payload=decision, **common), tenant, actor))
    if verdict == "ALLOW":
        execution: dict[str, Any] = {"output_text": "ok", "error": "a string is not an error object"}
        if outcome == "error":
            execution = {"error": {"code": "llm.timeout", "message": "too slow"}}
        out.append(_tenanted(draft(cid, EventKind.EXECUTION, payload=execution, **common), tenant, actor))
    return out


def mixed_ledger(store: LedgerStore) -> None:
    """Tenants (and no tenant), threads, actors, streams, lanes and every outcome; batches that
    span threads and turns split over batches; a retried batch."""
    outcomes = ("ALLOW", "DENY", "error", "pending")
    batch: list[EventDraft] = []
    for n in range(40):
        tenant = (None, "acme", "globex")[n % 3]
        thread = f"t-{n % 7}"
        drafts = turn_drafts(
            n,
            thread=thread,
            tenant=tenant,
            actor=f"actor-{n % 4}",
            stream=("default", "audit")[n % 2],
            lane=("user_chat", "batch")[(n // 2) % 2],
            outcome=outcomes[n % 4],
        )
        batch.extend(drafts)
        if n % 3 == 2:  # INTENT in one batch, the rest in the next (as a turn is recorded)
            store.append_many(batch[:-1])
            store.append_many(batch)  # a retry of what is there, plus the last event
            batch = []
    store.append_many(batch)
