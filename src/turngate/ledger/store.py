"""LedgerStore: the append-only, hash-chained event log over SQLAlchemy Core.

Two backends, one store: SQLite (the default, ``sqlite:///path/ledger.sqlite3``) and PostgreSQL
(``postgresql+psycopg://user:password@host:5432/db``). The SQL is portable except in the branches
marked ``SQLite only`` / ``PostgreSQL only``.

Writes are serialized twice: by a process-local lock (threads of one process queue up here
instead of spinning on the database's lock) and by the database's write lock, taken up front
(``BEGIN IMMEDIATE`` on SQLite, ``pg_advisory_xact_lock`` on PostgreSQL), so the read of the
last index and the insert of the next one are one atomic step across processes. On PostgreSQL
writes run in READ COMMITTED, so the statements after the lock see every earlier writer's
commit; reads run in REPEATABLE READ READ ONLY, so each read method sees one snapshot.

Every method is synchronous and thread-safe: it is called from sync Temporal activities, the
FastAPI threadpool and the CLI. :meth:`LedgerStore.change_listener` is the async way to learn
of appends (LISTEN/NOTIFY on PostgreSQL, a cheap poll on SQLite).

Past 500 lines on purpose: every read and write of the event log goes through this one class,
whose locking, snapshot and outage rules are read together. What does not need them lives
beside it: the engine (``engine.py``), row conversions (``rows.py``), the thread summary
(``summary.py``), the thread list (``thread_list.py``) and turn pages (``turn_page.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Engine,
    Select,
    bindparam,
    func,
    select,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, RowMapping

from turngate.core.events import Event, EventDraft, EventKind, seal
from turngate.ledger import prepared, summary, thread_list
from turngate.ledger.engine import (
    DEFAULT_BUSY_TIMEOUT_MS,
    DEFAULT_LEDGER_TIMEOUT_S,
    ONE_STATEMENT_OPTION,
    create_ledger_engine,
    is_sqlite_memory,
    migrate,
    migration_lock,
    normalize_url,
    postgres_connect_args,
    unavailable_on_db_errors,
)
from turngate.ledger.errors import LedgerConflictError, LedgerError, LedgerUnavailableError
from turngate.ledger.listen import (
    DEFAULT_POLL_INTERVAL_S,
    NOTIFY_CHANNEL,
    ChangeListener,
    PollingChangeListener,
    PostgresChangeListener,
)
from turngate.ledger.ref_candidates import choose_ref_candidates, turn_elsewhere_statement
from turngate.ledger.rows import (
    RowKeys,
    cap_page,
    event_from_row,
    event_to_row,
    identity_bytes,
    in_chunks,
    tenant_filter,
    utc_now_iso,
)
from turngate.ledger.schema import EVENT_COLUMNS, events, index_column, ledger_counts
from turngate.ledger.thread_claims import ThreadInUseError, blocked_statement
from turngate.ledger.thread_list import ThreadFilter, ThreadPage
from turngate.ledger.turn_page import TurnPage, read_turn_page

# Statements built once (compiled once, then served from SQLAlchemy's statement cache).
_SELECT_LAST = select(index_column, events.c.digest).order_by(index_column.desc()).limit(1)
_SELECT_BY_CORRELATIONS = select(events).where(events.c.correlation_id.in_(bindparam("ids", expanding=True)))


# --------------------------------------------------------------------------- the store


def _check_thread_claims(conn: Connection, drafts: Sequence[EventDraft]) -> None:
    """Under the write lock: refuse a new INTENT that would mix tenants in its thread (an INTENT
    already recorded under its correlation id is left to the idempotency check)."""
    for draft in drafts:
        if draft.kind != EventKind.INTENT:
            continue
        recorded = conn.execute(prepared.INTENT_RECORDED, {"correlation_id": draft.correlation_id}).first()
        if recorded is not None:
            continue
        blocked = conn.execute(*blocked_statement(draft.tenant_id, draft.thread_id, draft.turn_id)).scalar()
        if blocked:
            raise ThreadInUseError(draft.correlation_id, draft.thread_id)


def _positional(row: dict[str, Any]) -> tuple[Any, ...]:
    """An event row in ``events`` column order."""
    return tuple(row[name] for name in EVENT_COLUMNS)


class LedgerStore:
    """The ledger. Open it with a SQLAlchemy URL; it migrates the schema to head on open."""

    def __init__(
        self,
        url: str,
        *,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        timeout_s: float = DEFAULT_LEDGER_TIMEOUT_S,
    ) -> None:
        parsed = normalize_url(url)
        #: The URL with any password masked (safe to log).
        self.url = parsed.render_as_string(hide_password=True)
        self._memory = is_sqlite_memory(parsed)
        self._busy_timeout_ms = busy_timeout_ms
        self._timeout_s = timeout_s
        self._write_lock = threading.Lock()
        # actor rows this store saw committed: appends skip writing them again
        self._known_actors = summary.KnownActors()
        # In-memory SQLite shares one connection between threads: serialize everything.
        self._shared_lock = threading.RLock() if self._memory else None
        self._marker_lock = threading.Lock()
        self._marker_conn: Any = None
        self._closed = False
        with unavailable_on_db_errors(f"open of {self.url}"):
            self._engine = create_ledger_engine(parsed, busy_timeout_ms=busy_timeout_ms, timeout_s=timeout_s)
            self._read_engine = self._engine
            self._one_statement_engine = self._engine.execution_options(**{ONE_STATEMENT_OPTION: True})
            if self._engine.dialect.name == "postgresql":
                # --- PostgreSQL only: one snapshot per read transaction, never a write ------
                self._read_engine = self._engine.execution_options(
                    isolation_level="REPEATABLE READ", postgresql_readonly=True
                )
                self._one_statement_engine = self._read_engine
            try:
                with self._engine.connect() as conn, migration_lock(conn):
                    migrate(conn)
            except BaseException:
                self._engine.dispose()
                raise

    # ----------------------------------------------------------------- plumbing

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def dialect(self) -> str:
        return self._engine.dialect.name

    def __enter__(self) -> LedgerStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release every connection. The store must not be used afterwards."""
        with self._marker_lock:
            if self._marker_conn is not None:
                self._marker_conn.close()
                self._marker_conn = None
        if not self._closed:
            self._closed = True
            self._engine.dispose()

    @contextmanager
    def read_connection(self, action: str = "read", *, one_statement: bool = False) -> Iterator[Connection]:
        """A read transaction: one consistent snapshot for every statement inside.
        ``one_statement``: for a single statement, which needs no transaction around it (SQLite
        then sends no BEGIN).

        For read-only tools over the raw rows (``verify_ledger``); never write through it.
        """
        with self._read(action, one_statement=one_statement) as conn:
            yield conn

    @contextmanager
    def _read(self, action: str, *, one_statement: bool = False) -> Iterator[Connection]:
        self._check_open()
        engine = self._one_statement_engine if one_statement else self._read_engine
        with (
            self._maybe_shared(),
            unavailable_on_db_errors(action),
            engine.connect() as conn,
            conn.begin(),
        ):
            yield conn

    @contextmanager
    def _write(self, action: str) -> Iterator[Connection]:
        self._check_open()
        with (
            self._write_lock,
            self._maybe_shared(),
            unavailable_on_db_errors(action),
            self._engine.connect() as conn,
            migration_lock(conn),
        ):
            yield conn

    @contextmanager
    def _maybe_shared(self) -> Iterator[None]:
        if self._shared_lock is None:
            yield
        else:
            with self._shared_lock:
                yield

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerError("the ledger store is closed")

    # ----------------------------------------------------------------- writes

    def append(self, draft: EventDraft, *, claim_thread: bool = False) -> Event:
        """Record ``draft`` as the next event, or return the identical event already recorded.

        Idempotent on (correlation_id, kind): a retry with the same identity and payload (the
        ``_obs`` part aside) returns the stored event; anything else raises
        :class:`LedgerConflictError`. ``claim_thread``: a new INTENT that would mix tenants in
        its thread raises :class:`ThreadInUseError` (the rule: ``ledger/thread_claims.py``).
        """
        return self.append_many([draft], claim_thread=claim_thread)[0]

    def append_many(self, drafts: Sequence[EventDraft], *, claim_thread: bool = False) -> list[Event]:
        """:meth:`append` for several drafts in one transaction (all or nothing)."""
        if not drafts:
            return []
        for attempt in (1, 2):
            try:
                with self._write("append") as conn:
                    if claim_thread:
                        _check_thread_claims(conn, drafts)
                    recorded = self._append_locked(conn, drafts)
                self._known_actors.committed(recorded)
                return recorded
            except sa_exc.IntegrityError as exc:
                # Unreachable while every writer takes the write lock; a writer that does not
                # (another tool) can still race us: re-read once, then give up loudly.
                if attempt == 2:
                    raise LedgerError(f"ledger append failed: {exc.orig}") from exc
        raise AssertionError("unreachable")

    def _append_locked(self, conn: Connection, drafts: Sequence[EventDraft]) -> list[Event]:
        wanted = {(d.correlation_id, str(d.kind)) for d in drafts}
        known: dict[tuple[str, str], Event] = {}
        ids = sorted({d.correlation_id for d in drafts})
        # one id (a turn's own append, the usual case): the constant statement, not an expanding
        # IN, which SQLAlchemy compiles again for each call
        queries = (
            [(prepared.BY_CORRELATION[False], {"correlation_id": ids[0]})]
            if len(ids) == 1
            else [(_SELECT_BY_CORRELATIONS, {"ids": list(chunk)}) for chunk in in_chunks(ids)]
        )
        for query, params in queries:
            for row in conn.execute(query, params).mappings():
                key = (row["correlation_id"], row["kind"])
                if key in wanted:
                    known[key] = event_from_row(row)
        last = conn.execute(_SELECT_LAST).first()
        next_index = 0 if last is None else int(last[0]) + 1
        prev_digest: str | None = None if last is None else str(last[1])
        recorded: list[Event] = []
        new_events: list[Event] = []
        for draft in drafts:
            key = (draft.correlation_id, str(draft.kind))
            existing = known.get(key)
            if existing is not None:
                if identity_bytes(existing) != identity_bytes(draft):
                    raise LedgerConflictError(draft.correlation_id, key[1], existing.index)
                recorded.append(existing)
                continue
            sealed = seal(draft, next_index, prev_digest, utc_now_iso())
            known[key] = sealed
            new_events.append(sealed)
            recorded.append(sealed)
            next_index += 1
            prev_digest = sealed.digest
        if new_events:
            # the events and the read-side summaries, in this transaction: only what was
            # inserted counts (on PostgreSQL one statement, so one notification per append)
            rows = [_positional(event_to_row(e)) for e in new_events]
            summary.write_appended(conn, rows, new_events, self._known_actors)
        return recorded

    # ----------------------------------------------------------------- point reads

    def get(self, index: int) -> Event | None:
        with self._read("get") as conn:
            row = conn.execute(select(events).where(index_column == index)).mappings().first()
        return None if row is None else event_from_row(row)

    def by_correlation(self, correlation_id: str, *, tenant_id: str | None = None) -> list[Event]:
        """Every event with this correlation_id, ordered by index (only ``tenant_id``'s when given)."""
        params = prepared.tenant_params(tenant_id, correlation_id=correlation_id)
        return self._select(prepared.BY_CORRELATION[tenant_id is not None], "by_correlation", params)

    def turn_events(self, thread_id: str, turn_id: str, *, tenant_id: str | None = None) -> list[Event]:
        """Every event of one turn, ordered by index (only ``tenant_id``'s when given)."""
        params = prepared.tenant_params(tenant_id, thread_id=thread_id, turn_id=turn_id)
        return self._select(prepared.TURN_EVENTS[tenant_id is not None], "turn_events", params)

    def intent_blocked(self, tenant_id: str | None, thread_id: str, turn_id: str) -> bool:
        """Whether an INTENT of ``tenant_id`` in this turn would be refused as mixing tenants
        in its thread (``ledger/thread_claims.py``): O(log n)."""
        with self._read("intent_blocked") as conn:
            return bool(conn.execute(*blocked_statement(tenant_id, thread_id, turn_id)).scalar())

    def thread_has_other_tenant(self, thread_id: str, tenant_id: str | None) -> bool:
        """Whether ``thread_id`` holds an event of any tenant but ``tenant_id`` (no tenant counts
        as another). Range seeks on (thread_id, tenant_id): O(log n), whatever the thread's length."""
        query = prepared.OTHER_TENANT_IN_THREAD[tenant_id is not None]
        with self._read("thread_has_other_tenant", one_statement=True) as conn:
            return bool(conn.execute(query, prepared.tenant_params(tenant_id, thread_id=thread_id)).scalar())

    def in_thread(self, thread_id: str, kind: str, *, after_index: int = -1, limit: int = 16) -> list[Event]:
        """The thread's events of ``kind`` after ``after_index``, oldest first, at most ``limit``
        (an index seek on (thread_id, index), never a scan of the thread)."""
        return self._select(
            select(events)
            .where(events.c.thread_id == thread_id, events.c.kind == str(kind), index_column > after_index)
            .order_by(index_column)
            .limit(cap_page(limit)),
            "in_thread",
        )

    def fetch_ref_candidates(
        self, thread_id: str, ref_ids: Sequence[str], *, tenant_id: str | None = None
    ) -> list[Event]:
        """The events that declared refs may point at, for deterministic resolution.

        With ``tenant_id`` only that tenant's events are candidates: another tenant's event is
        as absent as one that does not exist (``REF_NOT_FOUND``, never ``CROSS_THREAD_REF``).

        Returns every event of ``thread_id`` whose correlation_id, turn_id or digest equals one
        of ``ref_ids``; plus, for each ref id with no match in the thread, at most one matching
        event of another thread (the lowest index), so the resolver can report
        ``CROSS_THREAD_REF`` instead of ``REF_NOT_FOUND``. Ordered by index, no duplicates. (The
        rules: :func:`turngate.ledger.ref_candidates.choose_ref_candidates`, which verify uses too.)

        Cost: index lookups proportional to the number of refs (unique (correlation_id, kind)
        bounds the correlation matches per ref), never a scan of the thread or of the log.
        """
        refs = list(dict.fromkeys(ref_ids))
        if not refs:
            return []
        found: dict[int, RowMapping] = {}
        tenant = tenant_filter(tenant_id)
        with self._read("fetch_ref_candidates") as conn:
            for chunk in in_chunks(refs):
                # correlation_id and digest matches in any thread (bounded per ref).
                for condition in (events.c.correlation_id.in_(chunk), events.c.digest.in_(chunk)):
                    for row in conn.execute(select(events).where(condition, *tenant)).mappings():
                        found[int(row["index"])] = row
                for row in conn.execute(
                    select(events).where(
                        events.c.thread_id == thread_id, events.c.turn_id.in_(chunk), *tenant
                    )
                ).mappings():
                    found[int(row["index"])] = row

            statement = turn_elsewhere_statement(in_tenant=tenant_id is not None, before=False)

            def turn_elsewhere(ref: str) -> RowKeys | None:
                params = {"ref": ref, "thread": thread_id, "tenant": tenant_id}
                row = conn.execute(statement, params).mappings().first()
                return None if row is None else RowKeys.of(row)

            keys = [RowKeys.of(row) for row in found.values()]
            chosen = choose_ref_candidates(thread_id, refs, keys, turn_elsewhere)
        return [event_from_row(key.row) for key in chosen]

    # ----------------------------------------------------------------- reads for the UI and audit

    def turn_page(self, thread_id: str, *, tenant_id: str | None, offset: int, limit: int) -> TurnPage:
        """One page of ``thread_id``'s turns, by INTENT order, with the thread's counts and the
        ledger head, from one snapshot (see :mod:`turngate.ledger.turn_page`). ``limit`` is
        capped at ``MAX_PAGE``."""
        with self._read("turn_page") as conn:
            return read_turn_page(
                conn,
                thread_id,
                tenant=tenant_filter(tenant_id),
                offset=max(0, int(offset)),
                limit=cap_page(limit),
                to_event=event_from_row,
            )

    def thread_page(
        self, wanted: ThreadFilter, *, limit: int, offset: int = 0, before: int | None = None
    ) -> tuple[ThreadPage, int | None]:
        """(a page of the thread list, the ledger's last index) from one snapshot (see
        :mod:`turngate.ledger.thread_list`)."""
        with self._read("thread_page") as conn:
            page = thread_list.list_threads(conn, wanted, limit=limit, offset=offset, before=before)
            head = conn.execute(select(func.max(index_column))).scalar_one()
        return page, None if head is None else int(head)

    def of_kind(
        self,
        kind: str,
        *,
        after_index: int = -1,
        until_index: int | None = None,
        thread_id: str | None = None,
        limit: int = 500,
    ) -> list[Event]:
        """Events of ``kind`` with an index above ``after_index`` (and at most ``until_index``),
        of one thread when given, ascending, at most ``limit``. The index range is walked in
        order and only the matching rows become events."""
        conditions = [events.c.kind == str(kind), index_column > after_index]
        if until_index is not None:
            conditions.append(index_column <= until_index)
        if thread_id is not None:
            conditions.append(events.c.thread_id == thread_id)
        return self._select(
            select(events).where(*conditions).order_by(index_column).limit(cap_page(limit)), "of_kind"
        )

    # ----------------------------------------------------------------- ranges

    def snapshot(
        self,
        *,
        offset: int = 0,
        limit: int = 100,
        stream_id: str | None = None,
        lane: str | None = None,
        thread_id: str | None = None,
        tenant_id: str | None = None,
    ) -> tuple[int, list[Event]]:
        """(length of the filtered log, one page of it), ordered by index.

        ``offset`` is a 0-based position within the filtered result (not an event index);
        ``limit`` is capped at ``MAX_PAGE``. Both values come from one read snapshot.

        Cost: unfiltered, position ``offset`` *is* event index ``offset`` (indexes start at 0 and
        have no gaps), so a page is one primary-key seek and the length is the head's index + 1.
        Filtered, the length comes from :mod:`turngate.ledger.summary`'s stream counts (a thread
        filter counts the thread's own entries); a filter that every event passes (a ledger of
        one tenant, one stream) then pages like no filter, any other walks the page's indexes on
        a covering index ((tenant_id, index), (stream_id, lane, index) or (thread_id, index))
        before fetching the page's rows by index: never a scan of the events themselves.
        """
        conditions = self._filters(stream_id=stream_id, lanes=[lane] if lane else None, tenant_id=tenant_id)
        if thread_id is not None:
            conditions.append(events.c.thread_id == thread_id)
        start, size = max(0, int(offset)), cap_page(limit)
        by_index = select(events).where(index_column >= start).order_by(index_column).limit(size)
        with self._read("snapshot") as conn:
            last = conn.execute(_SELECT_LAST).first()
            length = 0 if last is None else int(last[0]) + 1
            if not conditions:
                total, page_query = length, by_index
            else:
                total = self._filtered_length(conn, conditions, stream_id, lane, thread_id, tenant_id)
                page_indexes = (
                    select(index_column).where(*conditions).order_by(index_column).offset(start).limit(size)
                )
                page_query = (
                    # a filter that every event passes (one tenant, one stream) pages like none
                    by_index
                    if total == length
                    else select(events)
                    .where(index_column.in_(page_indexes.scalar_subquery()))
                    .order_by(index_column)
                )
            rows = conn.execute(page_query).mappings().all()
        return total, [event_from_row(row) for row in rows]

    @staticmethod
    def _filtered_length(
        conn: Connection,
        conditions: list[ColumnElement[bool]],
        stream_id: str | None,
        lane: str | None,
        thread_id: str | None,
        tenant_id: str | None,
    ) -> int:
        if thread_id is not None:  # bounded by the thread's length
            return int(conn.execute(select(func.count()).select_from(events).where(*conditions)).scalar_one())
        counted = (
            [ledger_counts.c.tenant_key == summary.tenant_key(tenant_id)] if tenant_id is not None else []
        )
        if stream_id is not None:
            counted.append(ledger_counts.c.stream_id == stream_id)
        if lane is not None:
            counted.append(ledger_counts.c.lane == lane)
        return int(
            conn.execute(
                select(func.coalesce(func.sum(ledger_counts.c.events), 0)).where(*counted)
            ).scalar_one()
        )

    def since(
        self,
        index_exclusive: int,
        *,
        limit: int = 500,
        stream_id: str | None = None,
        lanes: Sequence[str] | None = None,
        tenant_id: str | None = None,
    ) -> list[Event]:
        """Events with index > ``index_exclusive`` (live tailing), ascending, at most ``limit``."""
        conditions = self._filters(stream_id=stream_id, lanes=lanes, tenant_id=tenant_id)
        if not conditions:  # the live tail of everything: the statement built once
            return self._select(prepared.SINCE, "since", {"after": index_exclusive, "limit": cap_page(limit)})
        return self._select(
            select(events)
            .where(index_column > index_exclusive, *conditions)
            .order_by(index_column)
            .limit(cap_page(limit)),
            "since",
        )

    def last(
        self,
        n: int,
        *,
        stream_id: str | None = None,
        lanes: Sequence[str] | None = None,
        tenant_id: str | None = None,
    ) -> list[Event]:
        """The last ``n`` matching events (a /tail backlog), ascending by index."""
        conditions = self._filters(stream_id=stream_id, lanes=lanes, tenant_id=tenant_id)
        newest_first = self._select(
            select(events).where(*conditions).order_by(index_column.desc()).limit(cap_page(n)), "last"
        )
        return newest_first[::-1]

    @staticmethod
    def _filters(
        *, stream_id: str | None, lanes: Sequence[str] | None, tenant_id: str | None = None
    ) -> list[ColumnElement[bool]]:
        conditions: list[ColumnElement[bool]] = tenant_filter(tenant_id)
        if stream_id is not None:
            conditions.append(events.c.stream_id == stream_id)
        if lanes is not None:
            conditions.append(events.c.lane.in_(list(lanes)))
        return conditions

    def _select(self, query: Select[Any], action: str, params: dict[str, Any] | None = None) -> list[Event]:
        with self._read(action, one_statement=True) as conn:
            rows = conn.execute(query, params).mappings().all()
        return [event_from_row(row) for row in rows]

    # ----------------------------------------------------------------- head and change marker

    def head(self) -> tuple[int, str | None]:
        """(number of events, digest of the last one); (0, None) for an empty ledger."""
        with self._read("head", one_statement=True) as conn:
            row = conn.execute(_SELECT_LAST).first()
        return (0, None) if row is None else (int(row[0]) + 1, str(row[1]))

    def change_marker(self) -> int:
        """A cheap value that changes whenever a commit lands (from any process).

        Compare markers for inequality only. SQLite: ``PRAGMA data_version`` read on a dedicated
        connection that never writes (it changes whenever any *other* connection commits)
        combined with the head count; both only grow, so the marker grows with every commit.
        PostgreSQL: the head count (the log is append-only, so every append changes it); prefer
        :meth:`change_listener` there, which is woken by NOTIFY instead of being polled.
        """
        self._check_open()
        if self.dialect != "sqlite" or self._memory:
            return self.head()[0]
        # --- SQLite only -----------------------------------------------------------------
        driver_error = self._engine.dialect.loaded_dbapi.Error
        with self._marker_lock, unavailable_on_db_errors("change_marker"):
            if self._marker_conn is None:
                self._marker_conn = self._engine.raw_connection()
            cursor = self._marker_conn.cursor()
            try:
                cursor.execute("PRAGMA data_version")
                data_version = int(cursor.fetchone()[0])
                cursor.execute('SELECT max("index") FROM events')
                max_index = cursor.fetchone()[0]
            except driver_error as exc:
                raise LedgerUnavailableError(f"ledger change_marker failed: {exc}") from exc
            finally:
                cursor.close()
        count = 0 if max_index is None else int(max_index) + 1
        return (data_version << 40) + count

    def change_listener(self, *, poll_interval_s: float = DEFAULT_POLL_INTERVAL_S) -> ChangeListener:
        """An async listener woken when events are appended, by this or any other process.

        PostgreSQL: a dedicated connection that ``LISTEN``s on ``turngate_ledger`` (every append
        transaction notifies it; delivered on commit), reconnecting by itself. SQLite: polls
        :meth:`change_marker` every ``poll_interval_s`` while a caller waits. See
        :mod:`turngate.ledger.listen` for the ``wait`` contract. The listener opens its own
        connection, so it outlives nothing: close it (``await listener.aclose()``) before or
        after :meth:`close`, it does not matter which.
        """
        self._check_open()
        if self.dialect == "postgresql":
            # --- PostgreSQL only ---------------------------------------------------------------
            _args, params = self._engine.dialect.create_connect_args(self._engine.url)
            params.pop("context", None)  # SQLAlchemy's adapters map, not a libpq parameter
            params.update(
                postgres_connect_args(
                    self._engine.url, busy_timeout_ms=self._busy_timeout_ms, timeout_s=self._timeout_s
                )
            )
            params["application_name"] = "turngate-ledger-listen"
            return PostgresChangeListener(dict(params), channel=NOTIFY_CHANNEL)
        return PollingChangeListener(self.change_marker, poll_interval_s=poll_interval_s)
