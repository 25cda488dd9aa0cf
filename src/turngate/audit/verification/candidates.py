"""The candidate events of INTENTs' declared refs, as the turn workflow's fetch selected them.

The rules are :func:`turngate.ledger.ref_candidates.choose_ref_candidates` (the ones
``store.fetch_ref_candidates`` applies); here they run over the ledger *as it was when the INTENT
was recorded* (the events before it), for many INTENTs at once: three key lookups per batch
instead of one store call per DECISION. Why "as of the INTENT": today's fetch also sees later
events, and a later in-thread match hides the cross-thread candidate that made the DECISION a
``CROSS_THREAD_REF``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache

from sqlalchemy import TextClause, bindparam, select, text
from sqlalchemy.engine import Connection

from turngate.audit.verification.event_cache import EventCache, read_rows
from turngate.core.events import Event
from turngate.core.refs import ref_lookup_ids
from turngate.ledger import LedgerStore
from turngate.ledger.ref_candidates import choose_ref_candidates, turn_elsewhere_statement
from turngate.ledger.rows import IN_CHUNK
from turngate.ledger.schema import StoredRow, events, index_column

# Key lookups name only the looked-up column and the index: their index covers them (SQLite
# keeps the rowid, here "index", in every index), so no row of the table is read; rows are
# then taken from the stream's recent rows, or read by index.
KEYS_BY_CORRELATION = select(index_column, events.c.correlation_id).where(
    events.c.correlation_id.in_(bindparam("ids", expanding=True))
)
KEYS_BY_DIGEST = select(index_column, events.c.digest).where(
    events.c.digest.in_(bindparam("ids", expanding=True))
)


def declared_ref_ids(intent: Event) -> list[str]:
    """The ref ids the workflow fetched candidates for (malformed lists fetch nothing: the
    resolver reports them as ``REF_INVALID``)."""
    raw = intent.payload.get("declared_refs")
    return ref_lookup_ids(raw) if isinstance(raw, list) else []


def fetch_candidates(store: LedgerStore, intent: Event) -> list[Event]:
    """The candidate events for ``intent``'s declared refs, fetched as the turn workflow does
    (today's ledger: verify's second opinion, replay's)."""
    ref_ids = declared_ref_ids(intent)
    return store.fetch_ref_candidates(intent.thread_id, ref_ids) if ref_ids else []


def ledger_candidates(store: LedgerStore, intent: Event) -> list[Event]:
    """:func:`read_candidates` for one INTENT, read from ``store``."""
    with store.read_connection("audit") as conn:
        return read_candidates(conn, [intent]).get(intent.correlation_id, [])


def read_candidates(
    conn: Connection, intents: Sequence[Event], cache: EventCache | None = None
) -> dict[str, list[Event]]:
    """correlation_id -> the candidate events of that INTENT's declared refs, for every INTENT
    that declares refs, as ``store.fetch_ref_candidates`` selected them when the INTENT was
    recorded.

    Three queries for any number of INTENTs (correlation_id ``IN``, digest ``IN``, (thread_id,
    turn_id) ``IN``), plus one per ref that matches nothing in its thread (a ref error) for the
    cross-thread turn_id lookup. Each is bounded by the refs, never a scan of a thread or the log.
    """
    cache = cache or EventCache()
    wanted = [(intent, declared_ref_ids(intent)) for intent in intents]
    wanted = [(intent, refs) for intent, refs in wanted if refs]
    if not wanted:
        return {}
    ref_ids = sorted({ref for _, refs in wanted for ref in refs})
    pairs = {(intent.thread_id, ref) for intent, refs in wanted for ref in refs}
    # Which rows match, from the key columns alone; then each matching row as an event, once.
    keys: dict[tuple[str, int], None] = {}
    for statement, name in ((KEYS_BY_CORRELATION, "correlation_id"), (KEYS_BY_DIGEST, "digest")):
        for row in read_rows(conn, statement, ref_ids):
            keys.setdefault((row[name], int(row["index"])))
    for row in _rows_by_pairs(conn, sorted(pairs)):
        keys.setdefault((row["turn_id"], int(row["index"])))
    built = cache.by_indexes(conn, sorted({index for _, index in keys}))
    matching: dict[str, list[Event]] = {}
    for value, index in keys:
        event = built.get(index)
        if event is not None:
            matching.setdefault(value, []).append(event)
    return {
        intent.correlation_id: candidates_as_of(intent, refs, matching, conn, cache)
        for intent, refs in wanted
    }


def candidates_as_of(
    intent: Event,
    ref_ids: Sequence[str],
    matching: Mapping[str, Sequence[Event]],
    conn: Connection,
    cache: EventCache,
) -> list[Event]:
    """The candidates ``store.fetch_ref_candidates(intent.thread_id, ref_ids)`` selected over the
    events before ``intent`` (of its tenant, when it has one). ``matching``: ref id -> the events
    whose correlation_id or digest is that id (any thread) or whose turn_id is that id (in the
    intent's thread)."""
    tenant = intent.tenant_id
    visible = [
        event
        for ref in ref_ids
        for event in matching.get(ref, ())
        # later, or another tenant's (the store filters refs the same way)
        if event.index < intent.index and (tenant is None or event.tenant_id == tenant)
    ]
    statement = turn_elsewhere_statement(in_tenant=tenant is not None, before=True)

    def turn_elsewhere(ref: str) -> Event | None:
        params = {"ref": ref, "thread": intent.thread_id, "before": intent.index, "tenant": tenant}
        row = conn.execute(statement, params).mappings().first()
        return None if row is None else cache.get(row)

    return choose_ref_candidates(intent.thread_id, ref_ids, visible, turn_elsewhere)


def _rows_by_pairs(conn: Connection, pairs: Sequence[tuple[str, str]]) -> Iterator[StoredRow]:
    """Key columns of the rows whose (thread_id, turn_id) is one of ``pairs``: a join with a
    VALUES list, one index probe per pair. (SQLite answers a row-value ``IN`` with a scan of the
    whole index, which made every batch cost as much as the ledger is long.)"""
    wanted = set(pairs)
    for start in range(0, len(pairs), IN_CHUNK):
        chunk = list(pairs[start : start + IN_CHUNK])
        # Padded to a power of two (repeating a pair): a handful of statements to compile and
        # cache, instead of one per chunk length.
        size = 1 << (len(chunk) - 1).bit_length()
        chunk += [chunk[-1]] * (size - len(chunk))
        params: dict[str, str] = {}
        for i, (thread_id, turn_id) in enumerate(chunk):
            params[f"t{i}"], params[f"r{i}"] = thread_id, turn_id
        for row in conn.execute(_pairs_statement(size), params).mappings():
            if (row["thread_id"], row["turn_id"]) in wanted:
                yield row


@lru_cache(maxsize=16)
def _pairs_statement(count: int) -> TextClause:
    # VALUES columns are column1, column2 on both SQLite and PostgreSQL.
    wanted = ", ".join(f"(:t{i}, :r{i})" for i in range(count))
    return text(
        'SELECT e."index", e.turn_id, e.thread_id FROM events AS e '
        f"JOIN (VALUES {wanted}) AS wanted ON e.thread_id = wanted.column1 AND e.turn_id = wanted.column2"
    )
