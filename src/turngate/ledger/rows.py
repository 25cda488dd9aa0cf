"""Ledger rows and events: one event is one row of ``events``; the helpers the store and its
readers share to convert, chunk and filter them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
)

from turngate.core.canonical import canonical_bytes
from turngate.core.events import Event, EventDraft, event_digest_scope
from turngate.ledger.schema import EVENT_COLUMNS, StoredRow, events

#: Ref ids / indexes per ``IN (...)`` list (well under every backend's bind-parameter limit).
IN_CHUNK = 500
MAX_PAGE = 2000


# --------------------------------------------------------------------------- rows <-> events


def utc_now_iso() -> str:
    """Observational timestamp: ISO-8601, UTC, microseconds, ``Z`` suffix."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def event_to_row(event: Event) -> dict[str, Any]:
    return {
        "index": event.index,
        "kind": str(event.kind),
        "thread_id": event.thread_id,
        "turn_id": event.turn_id,
        "parent_turn_id": event.parent_turn_id,
        "correlation_id": event.correlation_id,
        "stream_id": event.stream_id,
        "lane": event.lane,
        "actor": event.actor,
        "intent_type": event.intent_type,
        "payload": canonical_bytes(event.payload).decode("utf-8"),
        "digest": event.digest,
        "prev_event_digest": event.prev_event_digest,
        "created_at": event.created_at or utc_now_iso(),
        "tenant_id": event.tenant_id,
    }


def event_from_row(row: StoredRow) -> Event:
    values = {name: row[name] for name in EVENT_COLUMNS}
    values["payload"] = json.loads(values["payload"])
    return Event.model_validate(values)


def identity_bytes(draft: EventDraft) -> bytes:
    """What must match for an append to be a retry of an existing event."""
    return canonical_bytes(event_digest_scope(draft, 0, None))


def in_chunks(values: Sequence[Any], size: int = IN_CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


@dataclass(frozen=True, slots=True)
class RowKeys:
    """A fetched row and the columns the candidate rules look at."""

    index: int
    thread_id: str
    correlation_id: str
    turn_id: str
    digest: str
    row: StoredRow

    @classmethod
    def of(cls, row: StoredRow) -> RowKeys:
        return cls(
            int(row["index"]), row["thread_id"], row["correlation_id"], row["turn_id"], row["digest"], row
        )


def tenant_filter(tenant_id: str | None) -> list[ColumnElement[bool]]:
    """Only ``tenant_id``'s events; no condition when None (an unscoped caller)."""
    return [] if tenant_id is None else [events.c.tenant_id == tenant_id]


def event_matches(
    event: Event, *, stream_id: str | None, lanes: Sequence[str] | None, tenant_id: str | None
) -> bool:
    """In memory, what the store's ``stream_id`` / ``lanes`` / ``tenant_id`` filters select
    (``LedgerStore.since``): readers that serve recent events from memory filter with this."""
    return (
        (tenant_id is None or event.tenant_id == tenant_id)
        and (stream_id is None or event.stream_id == stream_id)
        and (lanes is None or event.lane in lanes)
    )


def cap_page(limit: int) -> int:
    return max(0, min(int(limit), MAX_PAGE))
