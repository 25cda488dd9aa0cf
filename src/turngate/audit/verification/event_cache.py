"""Verify's bounded caches: recently streamed rows and the events built from them.

A DECISION's inputs (its INTENT, the candidates of its refs) are usually a few hundred events
back in the stream: keeping the most recent ones parsed saves reading and parsing them again.
Every cache is bounded, so memory stays flat in the size of the ledger.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Select, bindparam, select
from sqlalchemy.engine import Connection

from turngate.core.events import Event
from turngate.ledger.chain_check import digest_row
from turngate.ledger.row_digest import UnreadableRow
from turngate.ledger.rows import IN_CHUNK
from turngate.ledger.schema import EVENT_COLUMNS, StoredRow, events, index_column

#: Recently streamed events (parsed) and digests (index -> recomputed), reused as DECISION inputs.
#: The cache starts at RECENT_EVENTS events (~8-13 KB each) and grows, up to ``cache_events``
#: (``turngate verify --cache-events``, default MAX_CACHE_EVENTS), when a turn names an event
#: it has let go: many threads turn at once (a thread's previous turn is ~3 x the active threads
#: events back). docs/AUDIT.md.
RECENT_EVENTS = 4096
MAX_CACHE_EVENTS = 16_384
RECENT_DIGESTS = 20_000

BY_INDEX = select(events).where(index_column.in_(bindparam("ids", expanding=True)))


def read_rows(conn: Connection, statement: Select[Any], ids: Sequence[Any]) -> Iterator[StoredRow]:
    """The rows of ``statement`` (an expanding ``:ids`` parameter) for ``ids``, chunk by chunk."""
    for start in range(0, len(ids), IN_CHUNK):
        yield from conn.execute(statement, {"ids": list(ids[start : start + IN_CHUNK])}).mappings()


def event_from(row: StoredRow, payload: dict[str, Any]) -> Event:
    """The event of a stored row whose payload is already parsed."""
    values = {name: row[name] for name in _ROW_FIELDS}
    values["payload"] = payload
    return Event.model_validate(values)


# The event's columns but its payload text: a parsed payload comes with the row (and rows kept
# in memory drop their text, see RangeAudit.run_batch).
_ROW_FIELDS = tuple(name for name in EVENT_COLUMNS if name != "payload")


def bounded_put(mapping: OrderedDict[Any, Any], key: Any, value: Any, limit: int) -> None:
    """Insert, forgetting the oldest entry first when ``mapping`` holds ``limit`` entries:
    memory stays flat in the size of the ledger. An OrderedDict, because finding the oldest
    entry of a plain dict that keeps losing its first entries costs a scan over the holes they
    leave (every insert cost as much as the bound)."""
    if key in mapping:  # re-inserted: it becomes the newest, as if popped and added again
        mapping[key] = value
        mapping.move_to_end(key)
        return
    while mapping and len(mapping) >= limit:
        mapping.popitem(last=False)
    if limit > 0:
        mapping[key] = value


class EventCache:
    """Rows turned into events once (a row that does not parse or validate is skipped: the chain
    pass reports it). The most recent ``limit`` events are kept, and so are the most recent
    streamed rows with their parsed payloads: an INTENT built for its DECISION is reused when
    the next turn names it, and a recent candidate is built without reading it again. Valid
    within one read snapshot."""

    def __init__(
        self,
        limit: int | None = None,
        digests: OrderedDict[int, str] | None = None,
        grow_to: int | None = None,
    ) -> None:
        self.by_index: OrderedDict[int, Event | None] = OrderedDict()
        self.rows: OrderedDict[int, tuple[StoredRow, dict[str, Any] | None]] = OrderedDict()
        self.limit = RECENT_EVENTS if limit is None else limit
        # The limit doubles, up to grow_to, while rows it has let go are needed again.
        self.grow_to = max(self.limit, grow_to or 0)
        self.first = -1  # the indexes of the first and the newest row streamed
        self.newest = -1
        # index -> digest recomputed from the stored row: rows read here (not streamed) add
        # theirs, so that the DECISION check need not digest them again from the model.
        self.digests = digests
        self.digest_limit = max(RECENT_DIGESTS, self.limit)

    def remember(self, row: StoredRow, payload: dict[str, Any] | None) -> None:
        """A row the chain pass just streamed (``payload`` None: not a JSON object)."""
        index = int(row["index"])
        if self.first < 0:
            self.first = index
        self.newest = max(self.newest, index)
        bounded_put(self.rows, index, (row, payload), self.limit)

    def get(self, row: StoredRow, payload: dict[str, Any] | None = None) -> Event | None:
        index = int(row["index"])
        if index in self.by_index:
            return self.by_index[index]
        try:
            if payload is None:
                payload = self._read_payload(row, index)
            event = event_from(row, payload) if isinstance(payload, dict) else None
        except (TypeError, ValueError):  # ValidationError is a ValueError
            event = None
        bounded_put(self.by_index, index, event, self.limit)
        self.rows.pop(index, None)  # the event stands for its row from now on
        return event

    def _read_payload(self, row: StoredRow, index: int) -> Any:
        if self.digests is not None and index not in self.digests:
            try:
                again, payload = digest_row(row)
            except UnreadableRow:
                pass  # parsed as below; the chain pass or the DECISION check reports it
            else:
                bounded_put(self.digests, index, again, self.digest_limit)
                return payload
        return json.loads(row["payload"])

    def _grow_for(self, reach: int) -> None:
        """A row ``reach`` events back that the stream had brought by had to be read again: hold
        that many from now on (doubling, up to ``grow_to``), so that the next turns, whose refs
        reach as far, find theirs. A reach beyond ``grow_to`` grows nothing: no size in reach
        would help. (Rows from before the range's first were never cached: they grow nothing.)"""
        if self.limit < reach <= self.grow_to:
            while self.limit < reach:
                self.limit = min(2 * self.limit, self.grow_to)
            self.digest_limit = max(self.digest_limit, self.limit)

    def by_indexes(self, conn: Connection, indexes: Sequence[int]) -> dict[int, Event | None]:
        """index -> event (None: not a valid event) for rows that exist; reads only the rows it
        has neither built nor seen streamed."""
        found: dict[int, Event | None] = {}
        unread: list[int] = []
        for index in indexes:
            if index in self.by_index:
                found[index] = self.by_index[index]
            elif index in self.rows:
                row, payload = self.rows[index]
                found[index] = self.get(row, payload) if payload is not None else None
            else:
                unread.append(index)
        let_go = [index for index in unread if 0 <= self.first <= index]
        if let_go:  # streamed here, and dropped: the cache was too small for them
            self._grow_for(self.newest - min(let_go))
        for row in read_rows(conn, BY_INDEX, unread):
            found[int(row["index"])] = self.get(row)
        return found
