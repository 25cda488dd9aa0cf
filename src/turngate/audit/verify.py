"""Full verification of a ledger: chain, decisions, observation split and artifacts.

:func:`verify_all` checks, for the whole ledger or a thread or an index range:

a. every event digest recomputed from its stored row, every chain link and index gap: the
   checker of :func:`turngate.ledger.verify_ledger` (:func:`turngate.ledger.verify.iter_checked`,
   which digests raw rows, see :mod:`turngate.ledger.verify_fast`);
b. every DECISION recomputed from stored inputs as :func:`turngate.core.decision.verify_decision`
   does (:func:`turngate.audit.verify_decisions.verify_decision_reusing`: the same checks, with
   the input events' digests taken from the chain pass that just recomputed them): the INTENT of
   the same correlation_id and the candidate events of its declared refs, selected by the rules
   of ``store.fetch_ref_candidates`` (the turn workflow's call) over the ledger as it was when
   the INTENT was recorded (:func:`read_candidates`; three key lookups per batch instead of one
   store call per DECISION). A DECISION that does not verify on those gets a second opinion from
   ``store.fetch_ref_candidates`` itself before it is reported;
c. ``boundary.context_config_digest`` against the configs the verifier knows (the current one
   first): a DECISION made under another config is a ``config_drift`` warning, not a failure,
   and its context digest cannot be recomputed without that config;
d. ``normative_input_digests`` name earlier INTENT events only (the context system: no observation leaked);
e. every artifact pointer the gateway wrote (:func:`turngate.core.pointers.server_pointers`) is
   re-hashed by the artifact store; pointer-shaped objects in a client's data are plain data.

The ledger is streamed once in index order inside one read transaction, ``batch_size`` rows at a
time: each batch is parsed and digested once (the chain checks), then its DECISIONs, EXECUTIONs
and artifact pointers are checked from the same parsed rows. Memory stays flat in the size of
the ledger (every cache is bounded), and nothing is capped. A large scope is split into index
ranges verified in parallel processes (:mod:`turngate.audit.verify_parallel`) whose findings
merge into the same report. It reports; it never repairs anything.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, MutableSequence, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import lru_cache, partial
from typing import Any

from pydantic import BaseModel, Field, ValidationError
from sqlalchemy import ColumnElement, Select, TextClause, bindparam, func, select, text
from sqlalchemy.engine import Connection

from turngate.artifacts.local import LocalArtifactStore
from turngate.artifacts.store import (
    ArtifactError,
    ArtifactNotFoundError,
    ArtifactStore,
    ArtifactUnavailableError,
    BaseArtifactStore,
    normalize_digest,
    parse_artifact_path,
    pointer_problems,
)
from turngate.audit.gc_passes import with_fewer_gc_passes
from turngate.audit.verify_decisions import verify_decision_reusing
from turngate.audit.verify_parallel import (
    Range,
    RangeBoard,
    can_fork,
    run_forked,
    shared_counters,
    usable_cores,
)
from turngate.audit.verify_shadow import verify_shadows
from turngate.audit.verify_spend import verify_spend
from turngate.core.canonical import digest_bytes
from turngate.core.context import ContextConfig, context_config_digest
from turngate.core.decision import verify_decision
from turngate.core.events import Event, EventKind
from turngate.core.limits import EVENT_PAYLOAD_LIMIT_BYTES
from turngate.core.manifest import ArtifactPointer
from turngate.core.pointers import server_pointers
from turngate.core.refs import ref_lookup_ids
from turngate.ledger import LedgerStore
from turngate.ledger.schema import EVENT_COLUMNS, events, index_column
from turngate.ledger.store import IN_CHUNK, is_sqlite_memory
from turngate.ledger.verify import (
    DEFAULT_BATCH_SIZE,
    CheckedRow,
    Claim,
    UnreadableRow,
    VerifyProblem,
    _check_duplicate_keys,
    _Checker,
    digest_row,
    iter_checked,
    recompute_digest,
    seed_before,
)

#: INTENTs kept in memory until their DECISION streams by (older ones are looked up again).
PENDING_INTENTS = 10_000
#: Recently checked artifact pointers (an artifact referenced twice is hashed once).
CHECKED_ARTIFACTS = 10_000
#: Recently streamed events (parsed) and digests (index -> recomputed), reused as DECISION inputs.
#: The cache starts at RECENT_EVENTS events (~8-13 KB each) and grows, up to ``cache_events``
#: (``turngate verify --cache-events``, default MAX_CACHE_EVENTS), when a turn names an event
#: it has let go: many threads turn at once (a thread's previous turn is ~3 x the active threads
#: events back). docs/AUDIT.md.
RECENT_EVENTS = 4096
MAX_CACHE_EVENTS = 16_384
RECENT_DIGESTS = 20_000


class AuditKind(StrEnum):
    """What a finding is about. Failures make a report not ok; warnings and info do not."""

    # (a) the chain, from turngate.ledger.verify_ledger
    DIGEST_MISMATCH = "digest_mismatch"
    CHAIN_BREAK = "chain_break"
    INDEX_GAP = "index_gap"
    DUPLICATE = "duplicate"
    # (b) decisions recomputed from stored inputs
    DECISION_WITHOUT_INTENT = "decision_without_intent"
    DECISION_MALFORMED = "decision_malformed"
    CONTEXT_DIGEST_MISMATCH = "context_digest_mismatch"
    RESOLVED_REFS_MISMATCH = "resolved_refs_mismatch"
    NORMATIVE_INPUTS_MISMATCH = "normative_inputs_mismatch"
    REF_ERROR_MISMATCH = "ref_error_mismatch"
    INPUT_DIGEST_MISMATCH = "input_digest_mismatch"
    DECISION_MISMATCH = "decision_mismatch"
    EXECUTION_WITHOUT_ALLOW = "execution_without_allow"
    EXECUTION_CONTEXT_MISMATCH = "execution_context_mismatch"
    # (c) the policy decided again (``--replay-policy``): it must decide the same
    POLICY_REPLAY_MISMATCH = "policy_replay_mismatch"
    # a raw blob in the ledger: a stored payload over the event payload limit (docs/ARTIFACTS.md)
    PAYLOAD_TOO_LARGE = "payload_too_large"
    # (d) the I_context / O_context split
    OBSERVATION_LEAK = "observation_leak"
    NORMATIVE_INPUT_UNKNOWN = "normative_input_unknown"
    # (e) artifacts
    ARTIFACT_MISSING = "artifact_missing"
    ARTIFACT_MISMATCH = "artifact_mismatch"
    ARTIFACT_POINTER_INVALID = "artifact_pointer_invalid"
    ARTIFACT_UNAVAILABLE = "artifact_unavailable"
    # warnings
    CONFIG_DRIFT = "config_drift"
    ARTIFACTS_NOT_CHECKED = "artifacts_not_checked"
    # info
    EXPIRED_SNAPSHOT = "expired_snapshot"


class Finding(BaseModel):
    kind: AuditKind
    index: int | None = Field(None, description="ledger index of the event the finding is about")
    correlation_id: str | None = None
    detail: str


class AuditReport(BaseModel):
    ok: bool = Field(description="no failures (warnings and info do not count)")
    thread_id: str | None = None
    since_index: int | None = None
    until_index: int | None = None
    checked_events: int = Field(description="events whose digest and chain link were recomputed")
    checked_decisions: int = Field(description="DECISIONs recomputed from their stored inputs")
    unverified_decisions: int = Field(0, description="DECISIONs made under a config the verifier lacks")
    checked_artifacts: int = Field(description="artifact pointers re-hashed against the store")
    failures: list[Finding] = Field(default_factory=list)
    warnings: list[Finding] = Field(default_factory=list)
    info: list[Finding] = Field(default_factory=list)
    head_index: int | None = Field(None, description="index of the last event checked")
    head_digest: str | None = Field(None, description="recomputed digest of the last event checked")
    context_config_digest: str = Field(description="digest of the config the verifier ran with")
    duration_ms: int
    events_per_s: float


ProgressFn = Callable[[int, int], None]


# --------------------------------------------------------------------------- shared helpers


def check_artifact(store: ArtifactStore, pointer: ArtifactPointer) -> tuple[str, str, str]:
    """``(status, detail, retention)`` of ``store.check(pointer)`` ("" for none).

    A store whose ``check`` is :meth:`BaseArtifactStore.check` (every store turngate ships) gets
    the same steps here, without an ``ArtifactCheck`` model per artifact: the same read, then
    the same comparisons (:func:`pointer_problems`, which ``check`` uses too)
    (tests/audit/test_verify.py compares both on intact and tampered artifacts). Raises what
    ``check`` raises."""
    if not isinstance(store, BaseArtifactStore) or type(store).check is not BaseArtifactStore.check:
        check = store.check(pointer)
        return check.status, check.detail or "", check.retention or ""
    expected = normalize_digest(pointer.sha256)
    parsed = parse_artifact_path(pointer.path)
    retention = parsed.retention if parsed else ""
    try:
        data = store._read(pointer.path)
    except ArtifactNotFoundError:
        return "missing", "no object at this path", retention
    problems = pointer_problems(pointer, expected, parsed, digest_bytes(data), len(data))
    return ("mismatch" if problems else "ok"), "; ".join(problems), retention


def parse_pointer(raw: Mapping[str, Any]) -> ArtifactPointer:
    """The pointer's known fields, validated (raises ``ValidationError``)."""
    if raw.keys() <= _POINTER_FIELDS:  # the usual case: nothing to leave out
        return ArtifactPointer.model_validate(raw)
    return ArtifactPointer.model_validate({k: raw[k] for k in _POINTER_FIELDS if k in raw})


_POINTER_FIELDS = frozenset(ArtifactPointer.model_fields)


_DECISION_PROBLEM_KINDS: tuple[tuple[str, AuditKind], ...] = (
    ("event_digest_mismatch", AuditKind.INPUT_DIGEST_MISMATCH),
    ("context_digest", AuditKind.CONTEXT_DIGEST_MISMATCH),
    ("normative_input_digests", AuditKind.NORMATIVE_INPUTS_MISMATCH),
    ("resolved_refs", AuditKind.RESOLVED_REFS_MISMATCH),
    ("ref error", AuditKind.REF_ERROR_MISMATCH),
)


def decision_problem_kind(problem: str) -> AuditKind:
    """Classify one problem string of :func:`verify_decision`."""
    for prefix, kind in _DECISION_PROBLEM_KINDS:
        if problem.startswith(prefix):
            return kind
    return AuditKind.DECISION_MISMATCH


def stored_config_digest(payload: Mapping[str, Any]) -> str | None:
    boundary = payload.get("boundary")
    value = boundary.get("context_config_digest") if isinstance(boundary, Mapping) else None
    return value if isinstance(value, str) else None


def declared_ref_ids(intent: Event) -> list[str]:
    """The ref ids the workflow fetched candidates for (malformed lists fetch nothing: the
    resolver reports them as ``REF_INVALID``)."""
    raw = intent.payload.get("declared_refs")
    return ref_lookup_ids(raw) if isinstance(raw, list) else []


def fetch_candidates(store: LedgerStore, intent: Event) -> list[Event]:
    """The candidate events for ``intent``'s declared refs, fetched as the turn workflow does."""
    ref_ids = declared_ref_ids(intent)
    return store.fetch_ref_candidates(intent.thread_id, ref_ids) if ref_ids else []


def event_from(row: Mapping[str, Any], payload: dict[str, Any]) -> Event:
    values = {name: row[name] for name in _ROW_FIELDS}
    values["payload"] = payload
    return Event.model_validate(values)


# The event's columns but its payload text: a parsed payload comes with the row (and rows kept
# in memory drop their text, see _Audit.run_batch).
_ROW_FIELDS = tuple(name for name in EVENT_COLUMNS if name != "payload")


def config_map(current: ContextConfig, known: Sequence[ContextConfig] = ()) -> dict[str, ContextConfig]:
    """digest -> config for every config the verifier may recompute with (the current one wins)."""
    configs: dict[str, ContextConfig] = {}
    for cfg in (current, *known):
        configs.setdefault(context_config_digest(cfg), cfg)
    return configs


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# --------------------------------------------------------------------------- bulk lookups

_BY_CORRELATION = select(events).where(events.c.correlation_id.in_(bindparam("ids", expanding=True)))
_BY_INDEX = select(events).where(index_column.in_(bindparam("ids", expanding=True)))
# Key lookups name only the looked-up column and the index: their index covers them (SQLite
# keeps the rowid, here "index", in every index), so no row of the table is read; rows are
# then taken from the stream's recent rows, or read by index.
_KEYS_BY_CORRELATION = select(index_column, events.c.correlation_id).where(
    events.c.correlation_id.in_(bindparam("ids", expanding=True))
)
_KEYS_BY_DIGEST = select(index_column, events.c.digest).where(
    events.c.digest.in_(bindparam("ids", expanding=True))
)
_TURN_ELSEWHERE = (
    select(events)
    .where(
        events.c.turn_id == bindparam("ref"),
        events.c.thread_id != bindparam("thread"),
        index_column < bindparam("before"),
    )
    .order_by(index_column)
    .limit(1)
)
# the same within one tenant: a tenant's refs never reach another tenant's events
_TURN_ELSEWHERE_IN_TENANT = _TURN_ELSEWHERE.where(events.c.tenant_id == bindparam("tenant"))


def _rows(conn: Connection, statement: Select[Any], ids: Sequence[Any]) -> Iterator[Mapping[str, Any]]:
    for start in range(0, len(ids), IN_CHUNK):
        yield from conn.execute(statement, {"ids": list(ids[start : start + IN_CHUNK])}).mappings()


def _rows_by_pairs(conn: Connection, pairs: Sequence[tuple[str, str]]) -> Iterator[Mapping[str, Any]]:
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


class _EventCache:
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
        self.rows: OrderedDict[int, tuple[Mapping[str, Any], dict[str, Any] | None]] = OrderedDict()
        self.limit = RECENT_EVENTS if limit is None else limit
        # The limit doubles, up to grow_to, while rows it has let go are needed again.
        self.grow_to = max(self.limit, grow_to or 0)
        self.first = -1  # the indexes of the first and the newest row streamed
        self.newest = -1
        # index -> digest recomputed from the stored row: rows read here (not streamed) add
        # theirs, so that the DECISION check need not digest them again from the model.
        self.digests = digests
        self.digest_limit = max(RECENT_DIGESTS, self.limit)

    def remember(self, row: Mapping[str, Any], payload: dict[str, Any] | None) -> None:
        """A row the chain pass just streamed (``payload`` None: not a JSON object)."""
        index = int(row["index"])
        if self.first < 0:
            self.first = index
        self.newest = max(self.newest, index)
        _bounded_put(self.rows, index, (row, payload), self.limit)

    def get(self, row: Mapping[str, Any], payload: dict[str, Any] | None = None) -> Event | None:
        index = int(row["index"])
        if index in self.by_index:
            return self.by_index[index]
        try:
            if payload is None:
                payload = self._read_payload(row, index)
            event = event_from(row, payload) if isinstance(payload, dict) else None
        except (TypeError, ValueError):  # ValidationError is a ValueError
            event = None
        _bounded_put(self.by_index, index, event, self.limit)
        self.rows.pop(index, None)  # the event stands for its row from now on
        return event

    def _read_payload(self, row: Mapping[str, Any], index: int) -> Any:
        if self.digests is not None and index not in self.digests:
            try:
                again, payload = digest_row(row)
            except UnreadableRow:
                pass  # parsed as below; the chain pass or the DECISION check reports it
            else:
                _bounded_put(self.digests, index, again, self.digest_limit)
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
        for row in _rows(conn, _BY_INDEX, unread):
            found[int(row["index"])] = self.get(row)
        return found


def read_candidates(
    conn: Connection, intents: Sequence[Event], cache: _EventCache | None = None
) -> dict[str, list[Event]]:
    """correlation_id -> the candidate events of that INTENT's declared refs, for every INTENT
    that declares refs, as ``store.fetch_ref_candidates`` selected them when the INTENT was
    recorded (see :func:`select_candidates`).

    Three queries for any number of INTENTs (correlation_id ``IN``, digest ``IN``, (thread_id,
    turn_id) ``IN``), plus one per ref that matches nothing in its thread (a ref error) for the
    cross-thread turn_id lookup. Each is bounded by the refs, never a scan of a thread or the log.
    """
    cache = cache or _EventCache()
    wanted = [(intent, declared_ref_ids(intent)) for intent in intents]
    wanted = [(intent, refs) for intent, refs in wanted if refs]
    if not wanted:
        return {}
    ref_ids = sorted({ref for _, refs in wanted for ref in refs})
    pairs = {(intent.thread_id, ref) for intent, refs in wanted for ref in refs}
    # Which rows match, from the key columns alone; then each matching row as an event, once.
    keys: dict[tuple[str, int], None] = {}
    for statement, name in ((_KEYS_BY_CORRELATION, "correlation_id"), (_KEYS_BY_DIGEST, "digest")):
        for row in _rows(conn, statement, ref_ids):
            keys.setdefault((row[name], int(row["index"])))
    for row in _rows_by_pairs(conn, sorted(pairs)):
        keys.setdefault((row["turn_id"], int(row["index"])))
    built = cache.by_indexes(conn, sorted({index for _, index in keys}))
    matching: dict[str, list[Event]] = {}
    for value, index in keys:
        event = built.get(index)
        if event is not None:
            matching.setdefault(value, []).append(event)

    def turn_elsewhere(ref: str, thread_id: str, before: int, tenant: str | None) -> Event | None:
        params = {"ref": ref, "thread": thread_id, "before": before, "tenant": tenant}
        statement = _TURN_ELSEWHERE if tenant is None else _TURN_ELSEWHERE_IN_TENANT
        row = conn.execute(statement, params).mappings().first()
        return None if row is None else cache.get(row)

    return {
        intent.correlation_id: select_candidates(intent, refs, matching, turn_elsewhere)
        for intent, refs in wanted
    }


def select_candidates(
    intent: Event,
    ref_ids: Sequence[str],
    matching: Mapping[str, Sequence[Event]],
    turn_elsewhere: Callable[[str, str, int, str | None], Event | None],
) -> list[Event]:
    """The rules of ``store.fetch_ref_candidates(intent.thread_id, ref_ids)`` applied to the
    ledger as it was when the INTENT was recorded (the events before it): every event of the
    thread whose correlation_id, turn_id or digest is a ref id; for a ref id that matches nothing
    in the thread, the lowest-index matching event of another thread.

    ``matching``: ref id -> the events whose correlation_id or digest is that id (any thread) or
    whose turn_id is that id (in the intent's thread); ``turn_elsewhere(ref, thread_id, before, tenant)``:
    the lowest-index event of another thread with that turn_id before ``before``.

    Why "as of the INTENT": today's fetch also sees later events, and a later in-thread match
    hides the cross-thread candidate that made the DECISION a ``CROSS_THREAD_REF``.
    """
    thread_id, tenant = intent.thread_id, intent.tenant_id
    found: dict[int, Event] = {}
    for ref in ref_ids:
        for event in matching.get(ref, ()):
            if event.index >= intent.index or (tenant is not None and event.tenant_id != tenant):
                continue  # later, or another tenant's (the store filters refs the same way)
            if ref in (event.correlation_id, event.digest) or (
                event.turn_id == ref and event.thread_id == thread_id
            ):
                found[event.index] = event
    in_thread = {index: event for index, event in found.items() if event.thread_id == thread_id}
    matched = {value for e in in_thread.values() for value in (e.correlation_id, e.turn_id, e.digest)}
    result = dict(in_thread)
    for ref in ref_ids:
        if ref in matched:
            continue
        elsewhere = [
            event
            for _, event in sorted(found.items())
            if event.thread_id != thread_id and ref in (event.correlation_id, event.digest)
        ][:1]
        by_turn = turn_elsewhere(ref, thread_id, intent.index, tenant)
        if by_turn is not None:
            elsewhere.append(by_turn)
        if elsewhere:
            event = min(elsewhere, key=lambda e: e.index)
            result[event.index] = event
    return [result[index] for index in sorted(result)]


def ledger_candidates(store: LedgerStore, intent: Event) -> list[Event]:
    """:func:`read_candidates` for one INTENT, read from ``store``."""
    with store.read_connection("audit") as conn:
        return read_candidates(conn, [intent]).get(intent.correlation_id, [])


@dataclass
class _Prefetched:
    intents: dict[str, Event | None] = field(default_factory=dict)
    decisions: dict[str, tuple[int, str, Any]] = field(default_factory=dict)
    candidates: dict[str, list[Event]] = field(default_factory=dict)
    normative: dict[str, Mapping[str, Any]] = field(default_factory=dict)


# --------------------------------------------------------------------------- the audit pass


@dataclass
class _Span:
    """How many findings of one sort, from which index to which (reported as one line)."""

    count: int
    first_index: int
    last_index: int
    first_correlation_id: str


@dataclass
class _Audit:
    store: LedgerStore
    conn: Connection  # the chain pass's read transaction: every lookup sees its snapshot
    artifacts: ArtifactStore | None
    configs: dict[str, ContextConfig]
    current_digest: str
    snapshot_grace: timedelta | None
    in_scope: Callable[[Mapping[str, Any]], bool]
    cache_events: int = MAX_CACHE_EVENTS
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    failures: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    info: list[Finding] = field(default_factory=list)
    checked_decisions: int = 0
    unverified_decisions: int = 0
    checked_artifacts: int = 0
    unchecked_artifacts: int = 0
    store_fetches: int = 0
    artifacts_stopped: bool = False
    drift: dict[str, _Span] = field(default_factory=dict)
    expired: _Span | None = None
    # INTENTs whose DECISION has not streamed by yet; DECISIONs whose EXECUTION has not.
    pending_intents: OrderedDict[str, tuple[Mapping[str, Any], dict[str, Any]]] = field(
        default_factory=OrderedDict
    )
    decisions: OrderedDict[str, tuple[int, str, Any]] = field(default_factory=OrderedDict)
    checked_pointers: OrderedDict[tuple[str, str, int], tuple[str, str, str]] = field(
        default_factory=OrderedDict
    )
    # index -> digest recomputed by the chain pass, for the most recent RECENT_DIGESTS events.
    digests: OrderedDict[int, str] = field(default_factory=OrderedDict)
    events: _EventCache = field(init=False)
    # DECISIONs that did not verify on the candidates as of their INTENT: they get the store's
    # own fetch as a second opinion once the read transaction is over (see second_opinions).
    doubtful: list[tuple[int, str, dict[str, Any], Event, ContextConfig, list[str]]] = field(
        default_factory=list
    )

    def __post_init__(self) -> None:
        self.events = self._new_cache()

    def _new_cache(self) -> _EventCache:
        return _EventCache(
            min(RECENT_EVENTS, self.cache_events), digests=self.digests, grow_to=self.cache_events
        )

    def fail(self, kind: AuditKind, index: int | None, correlation_id: str | None, detail: str) -> None:
        self.failures.append(Finding(kind=kind, index=index, correlation_id=correlation_id, detail=detail))

    # ---- one batch

    def run_batch(self, batch: Sequence[CheckedRow]) -> None:
        rows = [(item.row, item.payload) for item in batch]
        for item in batch:
            if item.digest is not None:
                _bounded_put(self.digests, int(item.row["index"]), item.digest, self.events.digest_limit)
        for row, payload in rows:
            self.events.remember(row, payload)
            if payload is not None and row["kind"] == EventKind.INTENT:
                _bounded_put(self.pending_intents, row["correlation_id"], (row, payload))
        found = self._prefetch(rows)
        for row, payload in rows:
            if payload is None:
                continue  # the chain pass reported it (digest_mismatch: payload is not a JSON object)
            kind = row["kind"]
            if kind == EventKind.DECISION:
                self._decision(row, payload, found)
            elif kind == EventKind.EXECUTION:
                self._execution(row, payload, found)
        # The batch's artifacts one after another (file reads back to back run faster than
        # interleaved with the DECISION work; findings are sorted by index in the end).
        for row, payload in rows:
            if payload is not None:
                for raw in server_pointers(row["kind"], payload):
                    self._pointer(row, raw)
        for row, _payload in rows:
            self._payload_size(row)
            # The caches keep rows with their parsed payloads: the text is not needed again.
            row.pop("payload", None)

    def _payload_size(self, row: Mapping[str, Any]) -> None:
        """A stored payload (canonical JSON) over the limit is a failure: large content belongs
        in the artifact store. Only long texts are encoded (a character is at most 4 bytes)."""
        text = row.get("payload")
        if not isinstance(text, str) or len(text) * 4 <= EVENT_PAYLOAD_LIMIT_BYTES:
            return
        size = len(text.encode("utf-8"))
        if size > EVENT_PAYLOAD_LIMIT_BYTES:
            self.fail(
                AuditKind.PAYLOAD_TOO_LARGE,
                int(row["index"]),
                row.get("correlation_id"),
                f"the stored payload is {size} bytes; the limit is {EVENT_PAYLOAD_LIMIT_BYTES}",
            )

    def _prefetch(self, rows: Sequence[tuple[dict[str, Any], dict[str, Any] | None]]) -> _Prefetched:
        """A few queries per batch, in the chain pass's snapshot, for everything the batch's
        checks look up: INTENTs and DECISIONs not seen in the stream, the events named by
        normative_input_digests, and the candidates for every declared ref (three key lookups
        instead of one ``fetch_ref_candidates`` call per DECISION)."""
        found = _Prefetched()
        decided = {
            row["correlation_id"] for row, p in rows if p is not None and row["kind"] == EventKind.DECISION
        }
        missing_intents: set[str] = set()
        wanted_digests: set[str] = set()
        for row, payload in rows:
            if payload is None or row["kind"] != EventKind.DECISION:
                continue
            cid = row["correlation_id"]
            cached = self.pending_intents.pop(cid, None)
            if cached is None:
                missing_intents.add(cid)
            else:
                found.intents[cid] = self.events.get(*cached)
            values = payload.get("normative_input_digests")
            if isinstance(values, list):
                wanted_digests.update(v for v in values if isinstance(v, str))
        missing_decisions = sorted(
            {
                row["correlation_id"]
                for row, p in rows
                if p is not None
                and row["kind"] == EventKind.EXECUTION
                and row["correlation_id"] not in self.decisions
                and row["correlation_id"] not in decided
            }
        )
        if not (missing_intents or missing_decisions or wanted_digests or found.intents):
            return found
        cache, conn = self.events, self.conn
        for row in _rows(conn, _BY_CORRELATION, sorted(missing_intents | set(missing_decisions))):
            event = cache.get(row)
            if event is None:
                continue
            if event.kind == EventKind.INTENT and event.correlation_id in missing_intents:
                found.intents.setdefault(event.correlation_id, event)
            elif event.kind == EventKind.DECISION and event.correlation_id in missing_decisions:
                found.decisions.setdefault(event.correlation_id, _decision_summary(event))
        # Which rows carry those digests; each row from the stream's recent rows if it is
        # there, else read. The digest column is trusted only where the chain pass recomputed
        # it (rows in scope); others are digested again.
        unread: set[int] = set()
        for key in _rows(conn, _KEYS_BY_DIGEST, sorted(wanted_digests)):
            index = int(key["index"])
            streamed = cache.rows.get(index)
            if streamed is None:
                unread.add(index)
            else:
                found.normative.setdefault(key["digest"], streamed[0])
        # Read as events (cached: the same INTENT is usually a candidate too, see below).
        in_order = sorted(unread)
        built = cache.by_indexes(conn, in_order)
        invalid: list[int] = []
        for index in in_order:
            event = built.get(index)
            if event is None:
                invalid.append(index)
                continue
            key = {"index": index, "kind": event.kind, "thread_id": event.thread_id, "digest": event.digest}
            if self.in_scope(key) or self.digests.get(index) == event.digest:
                found.normative.setdefault(event.digest, key)
        for row in _rows(conn, _BY_INDEX, invalid):  # rows that are no valid event: as stored
            if self.in_scope(row) or recompute_digest(row) == row["digest"]:
                found.normative.setdefault(row["digest"], row)
        intents = [intent for intent in found.intents.values() if intent is not None]
        found.candidates = read_candidates(conn, intents, cache)
        missing = missing_intents - set(found.intents)
        found.intents.update(dict.fromkeys(missing))
        return found

    # ---- (b), (c), (d)

    def _decision(self, row: Mapping[str, Any], payload: dict[str, Any], found: _Prefetched) -> None:
        index, cid = int(row["index"]), row["correlation_id"]
        _bounded_put(
            self.decisions, cid, (index, str(payload.get("decision")), payload.get("context_digest"))
        )
        self._normative_inputs(index, cid, payload, found.normative)
        config_digest = stored_config_digest(payload)
        if config_digest is None:
            self.fail(
                AuditKind.DECISION_MALFORMED,
                index,
                cid,
                "the DECISION has no boundary.context_config_digest (context-system invariant 3)",
            )
            return
        intent = found.intents.get(cid)
        if intent is None or intent.index >= index:
            where = "no INTENT" if intent is None else f"its INTENT is at index {intent.index}, after it"
            self.fail(
                AuditKind.DECISION_WITHOUT_INTENT,
                index,
                cid,
                f"{where}: the DECISION cannot be recomputed from stored inputs",
            )
            return
        cfg = self.configs.get(config_digest)
        if cfg is None:
            self.unverified_decisions += 1
            drift = self.drift.get(config_digest)
            if drift is None:
                self.drift[config_digest] = _Span(1, index, index, cid)
            else:
                drift.count += 1
                drift.last_index = index
            return
        self.checked_decisions += 1
        candidates = found.candidates.get(cid, [])
        problems = verify_decision_reusing(payload, intent, candidates, cfg, self.digests)
        if not problems:  # its inputs verified: the shadow policies' entries are recomputed on them
            for problem in verify_shadows(payload, intent, candidates, cfg):
                self.fail(AuditKind.DECISION_MISMATCH, index, cid, problem)
            for problem in verify_spend(self.conn, payload, intent, index):  # docs/BUDGETS.md
                self.fail(AuditKind.DECISION_MISMATCH, index, cid, problem)
            return
        if cid in found.candidates:
            self.doubtful.append((index, cid, payload, intent, cfg, problems))
            return
        for problem in problems:
            self.fail(decision_problem_kind(problem), index, cid, problem)

    def second_opinions(self) -> None:
        """The candidates as the store fetches them today (exactly the workflow's call) for every
        DECISION that did not verify on the candidates as of its INTENT: either set reproducing
        the DECISION verifies it. Run outside the chain pass's read transaction."""
        for index, cid, payload, intent, cfg, problems in self.doubtful:
            try:
                fetched = self._fetch(intent)
            except ValidationError:  # a candidate row the store cannot read: no second opinion
                fetched = None
            if fetched is None or verify_decision(payload, intent, fetched, cfg):
                for problem in problems:
                    self.fail(decision_problem_kind(problem), index, cid, problem)
        self.doubtful.clear()

    def forget(self) -> None:
        """Drop the caches once the range is done (its findings and counts stay): a process
        that goes on to another range holds one range's caches at a time."""
        for cache in (self.pending_intents, self.decisions, self.checked_pointers, self.digests):
            cache.clear()
        self.events = self._new_cache()

    def _fetch(self, intent: Event) -> list[Event]:
        self.store_fetches += 1
        return fetch_candidates(self.store, intent)

    def _normative_inputs(
        self,
        index: int,
        cid: str,
        payload: Mapping[str, Any],
        normative: Mapping[str, Mapping[str, Any]],
    ) -> None:
        digests = payload.get("normative_input_digests")
        if digests is None:
            digests = []
        if not isinstance(digests, list) or not all(isinstance(d, str) for d in digests):
            self.fail(
                AuditKind.DECISION_MALFORMED, index, cid, "normative_input_digests is not a list of digests"
            )
            return
        for value in digests:
            found = normative.get(value)
            if found is None:
                self.fail(
                    AuditKind.NORMATIVE_INPUT_UNKNOWN,
                    index,
                    cid,
                    f"normative input {value} is the digest of no event in the ledger",
                )
            elif found["kind"] != EventKind.INTENT:
                self.fail(
                    AuditKind.OBSERVATION_LEAK,
                    index,
                    cid,
                    f"normative input {value} is the {found['kind']} at index {found['index']}: "
                    "only INTENT payloads may inform governance (the context system)",
                )
            elif int(found["index"]) >= index:
                self.fail(
                    AuditKind.NORMATIVE_INPUT_UNKNOWN,
                    index,
                    cid,
                    f"normative input {value} is the INTENT at index {found['index']}, not an earlier one",
                )

    def _execution(self, row: Mapping[str, Any], payload: Mapping[str, Any], found: _Prefetched) -> None:
        index, cid = int(row["index"]), row["correlation_id"]
        known = self.decisions.pop(cid, None) or found.decisions.get(cid)
        if known is None or known[0] >= index or known[1] != "ALLOW":
            if known is None:
                what = "no DECISION"
            elif known[0] >= index:
                what = f"its DECISION is at index {known[0]}, after it"
            else:
                what = f"the DECISION at index {known[0]} is {known[1]}"
            self.fail(
                AuditKind.EXECUTION_WITHOUT_ALLOW,
                index,
                cid,
                f"an EXECUTION without an earlier ALLOW: {what}",
            )
            return
        if "context_digest" in payload and payload.get("context_digest") != known[2]:
            self.fail(
                AuditKind.EXECUTION_CONTEXT_MISMATCH,
                index,
                cid,
                f"the EXECUTION names context_digest {payload.get('context_digest')}, "
                f"its DECISION {known[2]}",
            )

    # ---- (e)

    def _pointer(self, row: Mapping[str, Any], raw: Mapping[str, Any]) -> None:
        index, cid = int(row["index"]), row["correlation_id"]
        try:
            pointer = parse_pointer(raw)
        except ValidationError as exc:
            reason = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in reason.get("loc", ()))
            self.fail(AuditKind.ARTIFACT_POINTER_INVALID, index, cid, f"{where}: {reason.get('msg')}")
            return
        if self.artifacts is None or self.artifacts_stopped:
            self.unchecked_artifacts += 1
            return
        key = (pointer.path, pointer.sha256, pointer.size_bytes)
        result = self.checked_pointers.get(key)
        if result is None:
            try:
                result = check_artifact(self.artifacts, pointer)
            except ArtifactUnavailableError as exc:
                self.artifacts_stopped = True
                self.unchecked_artifacts += 1
                self.fail(
                    AuditKind.ARTIFACT_UNAVAILABLE,
                    index,
                    cid,
                    f"{pointer.path}: the artifact store failed ({exc}); artifact checks stopped",
                )
                return
            except (ArtifactError, ValueError) as exc:
                self.fail(AuditKind.ARTIFACT_POINTER_INVALID, index, cid, f"{pointer.path}: {exc}")
                return
            _bounded_put(self.checked_pointers, key, result, CHECKED_ARTIFACTS)
        self.checked_artifacts += 1
        status, detail, retention = result
        if status == "ok":
            return
        if status == "missing" and retention == "snapshot" and self._expired(pointer, row):
            if self.expired is None:
                self.expired = _Span(1, index, index, cid)
            else:
                self.expired.count += 1
                self.expired.last_index = index
            return
        kind = AuditKind.ARTIFACT_MISSING if status == "missing" else AuditKind.ARTIFACT_MISMATCH
        self.fail(kind, index, cid, f"{pointer.path}: {detail or status}")

    def _expired(self, pointer: ArtifactPointer, row: Mapping[str, Any]) -> bool:
        if self.snapshot_grace is None:
            return False
        created = _parse_time(pointer.created_at) or _parse_time(row.get("created_at"))
        return created is not None and self.now - created > self.snapshot_grace

    # ---- the end

    def finish(self) -> None:
        for config_digest, drift in self.drift.items():
            self.warnings.append(
                Finding(
                    kind=AuditKind.CONFIG_DRIFT,
                    index=drift.first_index,
                    correlation_id=drift.first_correlation_id,
                    detail=(
                        f"{drift.count} DECISION(s) (index {drift.first_index}..{drift.last_index}) "
                        f"were made under context config {config_digest}, "
                        f"not the current {self.current_digest}: "
                        "not a tamper, but their context_digest cannot be recomputed without that config"
                    ),
                )
            )
        if self.expired is not None:
            self.info.append(
                Finding(
                    kind=AuditKind.EXPIRED_SNAPSHOT,
                    index=self.expired.first_index,
                    correlation_id=self.expired.first_correlation_id,
                    detail=(
                        f"{self.expired.count} snapshot artifact(s) referenced from index "
                        f"{self.expired.first_index}..{self.expired.last_index} are gone and older than "
                        f"the grace period {self.snapshot_grace}: collected by gc, as expected"
                    ),
                )
            )
        if self.unchecked_artifacts and self.artifacts is None:
            self.warnings.append(
                Finding(
                    kind=AuditKind.ARTIFACTS_NOT_CHECKED,
                    detail=(
                        f"{self.unchecked_artifacts} artifact pointer(s) not checked: no artifact store given"
                    ),
                )
            )
        elif self.unchecked_artifacts > 1:
            self.fail(
                AuditKind.ARTIFACT_UNAVAILABLE,
                None,
                None,
                f"{self.unchecked_artifacts} artifact pointer(s) not checked: the artifact store failed",
            )


def _bounded_put(mapping: OrderedDict[Any, Any], key: Any, value: Any, limit: int | None = None) -> None:
    """Insert, forgetting the oldest entry first when ``mapping`` holds ``limit`` entries
    (default :data:`PENDING_INTENTS`): memory stays flat in the size of the ledger. An
    OrderedDict, because finding the oldest entry of a plain dict that keeps losing its first
    entries costs a scan over the holes they leave (every insert cost as much as the bound)."""
    bound = PENDING_INTENTS if limit is None else limit
    if key in mapping:  # re-inserted: it becomes the newest, as if popped and added again
        mapping[key] = value
        mapping.move_to_end(key)
        return
    while mapping and len(mapping) >= bound:
        mapping.popitem(last=False)
    if bound > 0:
        mapping[key] = value


def _decision_summary(event: Event) -> tuple[int, str, Any]:
    return (event.index, str(event.payload.get("decision")), event.payload.get("context_digest"))


# --------------------------------------------------------------------------- verify_all


def _conditions(
    thread_id: str | None, since_index: int | None, until_index: int | None
) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if thread_id is not None:
        conditions.append(events.c.thread_id == thread_id)
    if since_index is not None:
        conditions.append(index_column >= since_index)
    if until_index is not None:
        conditions.append(index_column <= until_index)
    return conditions


@with_fewer_gc_passes
def verify_all(
    store: LedgerStore,
    *,
    artifacts: ArtifactStore | None,
    context_config: ContextConfig,
    thread_id: str | None = None,
    since_index: int | None = None,
    until_index: int | None = None,
    progress: ProgressFn | None = None,
    snapshot_grace: timedelta | None = None,
    known_configs: Sequence[ContextConfig] = (),
    batch_size: int = DEFAULT_BATCH_SIZE,
    workers: int | None = None,
    cache_events: int | None = None,
) -> AuditReport:
    """Verify the ledger (or ``thread_id``'s events, or the indexes ``since_index..until_index``).

    ``artifacts=None`` skips the artifact checks (a ``artifacts_not_checked`` warning says how
    many pointers were seen). ``known_configs`` are earlier context configs: a DECISION pinned to
    one of them is recomputed with it instead of being reported as ``config_drift``. A missing
    ``snapshot``-retention artifact older than ``snapshot_grace`` is ``expired_snapshot`` info
    (gc deletes those); without ``snapshot_grace`` it is a failure like any missing artifact.
    ``progress(done, total)`` is called after every batch; ``total`` is twice the number of
    events in scope (each event is digested and chain-checked, then its decision and artifact
    checks run: one pass does both, batch by batch). ``workers``: processes to verify index
    ranges in (default: one per core for a scope of at least :data:`PARALLEL_MIN_EVENTS` events
    when forking is safe, see :mod:`turngate.audit.verify_parallel`); the report is the same
    either way. ``cache_events`` (default :data:`MAX_CACHE_EVENTS`): at most this many recent
    events each process keeps parsed (memory for speed: the cache starts at
    :data:`RECENT_EVENTS` and grows only when a turn names an event it has let go; a DECISION
    whose refs reach further back than ``cache_events`` reads them again).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if cache_events is None:
        cache_events = MAX_CACHE_EVENTS
    elif cache_events < 0:
        raise ValueError("cache_events must not be negative")
    started = time.perf_counter()
    conditions = _conditions(thread_id, since_index, until_index)
    dup = _Checker()
    with store.read_connection("verify") as conn:
        count, last = conn.execute(
            select(func.count(), func.max(index_column)).select_from(events).where(*conditions)
        ).one()
        in_scope_count, last_index = int(count), (None if last is None else int(last))
        # Duplicate keys first, over the whole scope: the parts then know which rows need a
        # correlation_id in the report.
        _check_duplicate_keys(conn, conditions, dup)
        parts = _worker_count(store, artifacts, in_scope_count, workers)
        bounds = _split(conn, conditions, in_scope_count, last_index, parts)
    configs = config_map(context_config, known_configs)
    plan = _Plan(
        thread_id=thread_id,
        since_index=since_index,
        last_index=last_index,
        whole=thread_id is None and since_index is None and until_index is None,
        conditions=conditions,
        batch_size=batch_size,
        configs=configs,
        snapshot_grace=snapshot_grace,
        note_indexes=frozenset(problem.index for problem in dup.problems),
        cache_events=cache_events,
    )

    # Index ranges, handed out and rebalanced between the processes (see RangeBoard).
    board = RangeBoard(bounds, min_steal=max(1, batch_size // 4)) if len(bounds) > 1 else None
    # Events checked by each process; the forked ones write theirs to shared memory.
    done_by_process = shared_counters(len(bounds)) if progress is not None and board is not None else [0]

    def report_progress(done_here: int) -> None:
        if progress is not None:
            # Each event counts twice (digests and chain, then decisions and artifacts): one
            # pass does both, batch by batch.
            done = done_here + sum(done_by_process[1:])
            progress(min(2 * done, 2 * in_scope_count), 2 * in_scope_count)

    if board is None:
        mine = [(None, _verify_part(store, artifacts, plan, bounds[0], report_progress))]
        theirs: list[list[tuple[int | None, _Tally]] | None] = []
    else:
        jobs = [
            partial(_forked_part, store, artifacts, plan, board, done_by_process, owner)
            for owner in range(1, len(bounds))
        ]
        mine, theirs = run_forked(
            partial(_verify_ranges, store, artifacts, plan, board, 0, report_progress), jobs
        )
    # The first range (unbounded below) is always this process's first: the others merge into
    # it in index order.
    checker, audit, correlation_of = mine[0][1]
    pieces = [(low, _tally(*part)) for low, part in mine[1:]]
    for owner, result in enumerate(theirs, start=1):
        if result is None and board is not None:  # the child failed: verify its ranges here
            result = [
                (low, _tally(*_verify_part(store, artifacts, plan, (low, high), None)))
                for _slot, low, high in board.ranges_of(owner)
            ]
        pieces.extend(result or [])
    for _low, tally in sorted(pieces, key=lambda piece: -1 if piece[0] is None else piece[0]):
        _absorb(checker, audit, correlation_of, tally)
    checker.problems.extend(dup.problems)
    if board is not None:
        report_progress(checker.checked)
    audit.finish()

    chain_findings = [
        Finding(
            kind=AuditKind(problem.kind.value),
            index=problem.index,
            correlation_id=correlation_of.get(problem.index),
            detail=problem.detail
            + (
                f" (expected {problem.expected}, found {problem.found})"
                if problem.expected or problem.found
                else ""
            ),
        )
        for problem in checker.problems
    ]
    failures = sorted(
        chain_findings + audit.failures,
        key=lambda f: (f.index if f.index is not None else -1, f.kind.value),
    )
    elapsed = time.perf_counter() - started
    return AuditReport(
        ok=not failures,
        thread_id=thread_id,
        since_index=since_index,
        until_index=until_index,
        checked_events=checker.checked,
        checked_decisions=audit.checked_decisions,
        unverified_decisions=audit.unverified_decisions,
        checked_artifacts=audit.checked_artifacts,
        failures=failures,
        warnings=audit.warnings,
        info=audit.info,
        head_index=checker.head_index,
        head_digest=checker.head_digest,
        context_config_digest=audit.current_digest,
        duration_ms=round(elapsed * 1000),
        events_per_s=round(checker.checked / elapsed, 1) if elapsed > 0 else 0.0,
    )


# --------------------------------------------------------------------------- parts


@dataclass(frozen=True)
class _Plan:
    """What every part of one verify_all run shares."""

    thread_id: str | None
    since_index: int | None
    last_index: int | None  # the head of the scope when the run started: nothing after it
    whole: bool  # the whole log: indexes from 0, no gaps
    conditions: list[ColumnElement[bool]]
    batch_size: int
    configs: dict[str, ContextConfig]
    snapshot_grace: timedelta | None
    note_indexes: frozenset[int]  # rows whose correlation_id a finding needs (besides chain problems)
    cache_events: int = MAX_CACHE_EVENTS

    def in_scope(self, row: Mapping[str, Any]) -> bool:
        index = int(row["index"])
        return (
            (self.thread_id is None or row["thread_id"] == self.thread_id)
            and (self.since_index is None or index >= self.since_index)
            and (self.last_index is not None and index <= self.last_index)
        )


#: A part's index range (inclusive; None: unbounded below).
_Bound = tuple[int | None, int | None]
_Part = tuple[_Checker, "_Audit", dict[int, str]]

#: Below this many events in scope, one process (forking costs more than it saves).
PARALLEL_MIN_EVENTS = 4_000


def _worker_count(
    store: LedgerStore, artifacts: ArtifactStore | None, events_in_scope: int, workers: int | None
) -> int:
    """How many processes: ``workers`` if given, else one per core for a large enough scope;
    always one where forking is unsafe or cannot share the stores (in-memory SQLite, S3)."""
    wanted = (
        workers if workers is not None else (usable_cores() if events_in_scope >= PARALLEL_MIN_EVENTS else 1)
    )
    wanted = max(1, min(wanted, events_in_scope))
    if wanted == 1 or is_sqlite_memory(store.engine.url) or not can_fork():
        return 1
    if artifacts is not None and not isinstance(artifacts, LocalArtifactStore):
        return 1  # a network client's sockets must not be shared with a child
    return wanted


def _split(
    conn: Connection,
    conditions: list[ColumnElement[bool]],
    count: int,
    last_index: int | None,
    parts: int,
) -> list[_Bound]:
    """``parts`` index ranges with about as many events in scope each."""
    if parts <= 1 or last_index is None:
        return [(None, last_index)]
    starts: list[int] = []
    for part in range(1, parts):
        start = conn.execute(
            select(index_column)
            .where(*conditions)
            .order_by(index_column)
            .offset(part * count // parts)
            .limit(1)
        ).scalar()
        if start is not None and (not starts or int(start) > starts[-1]):
            starts.append(int(start))
    lows: list[int | None] = [None, *starts]
    highs: list[int | None] = [start - 1 for start in starts] + [last_index]
    return list(zip(lows, highs, strict=True))


def _verify_part(
    store: LedgerStore,
    artifacts: ArtifactStore | None,
    plan: _Plan,
    bound: _Bound,
    progress: Callable[[int], None] | None,
    claim: Claim | None = None,
) -> _Part:
    """The chain pass and the audit of one index range, in one read transaction; then the
    second opinions (which need the store's own reads). ``claim``: the range is on a
    :class:`RangeBoard` and another process may take its end (see :data:`Claim`)."""
    low, high = bound
    checker = _Checker()
    correlation_of: dict[int, str] = {}
    query = select(events).where(*plan.conditions)
    if low is not None:
        query = query.where(index_column >= low)
    if high is not None:
        query = query.where(index_column <= high)
    query = query.order_by(index_column)
    with store.read_connection("verify") as conn:
        audit = _Audit(
            store=store,
            conn=conn,
            artifacts=artifacts,
            configs=plan.configs,
            current_digest=next(iter(plan.configs)),
            snapshot_grace=plan.snapshot_grace,
            in_scope=plan.in_scope,
            cache_events=plan.cache_events,
        )
        if high is not None:  # else the scope is empty
            seed = seed_before(conn, low) if plan.whole and low is not None else (0, None)
            batches = iter_checked(
                conn, query, checker, whole=plan.whole, batch_size=plan.batch_size, seed=seed, claim=claim
            )
            for batch in batches:
                audit.run_batch(batch)
                _note_correlations(checker, plan.note_indexes, batch, correlation_of)
                if progress is not None:
                    progress(checker.checked)
    audit.second_opinions()
    audit.forget()
    return checker, audit, correlation_of


def _verify_ranges(
    store: LedgerStore,
    artifacts: ArtifactStore | None,
    plan: _Plan,
    board: RangeBoard,
    owner: int,
    progress: Callable[[int], None] | None,
) -> list[tuple[int | None, _Part]]:
    """Verify ``owner``'s first range, then ranges taken from the others until none is worth
    taking: (low, part) for each. ``progress`` gets this process's running count."""
    parts: list[tuple[int | None, _Part]] = []
    done_before = 0

    def progress_here(done: int) -> None:
        if progress is not None:
            progress(done_before + done)

    taken: Range | None = board.first(owner)
    while taken is not None:
        slot, low, high = taken
        part = _verify_part(store, artifacts, plan, (low, high), progress_here, partial(board.claim, slot))
        board.finish(slot)
        parts.append((low, part))
        done_before += part[0].checked
        taken = board.steal(owner)
    return parts


def _forked_part(
    store: LedgerStore,
    artifacts: ArtifactStore | None,
    plan: _Plan,
    board: RangeBoard,
    done_by_process: MutableSequence[int],
    owner: int,
) -> list[tuple[int | None, _Tally]]:
    # A forked child must not touch the parent's pooled connections: a pool of its own.
    store.engine.dispose(close=False)

    def progress(done: int) -> None:
        if len(done_by_process) > owner:
            done_by_process[owner] = done

    return [
        (low, _tally(*part)) for low, part in _verify_ranges(store, artifacts, plan, board, owner, progress)
    ]


_COUNTS = (
    "checked_decisions",
    "unverified_decisions",
    "checked_artifacts",
    "unchecked_artifacts",
    "store_fetches",
)


@dataclass
class _Tally:
    """What a part found, in a form a child process can send back (merged by :func:`_absorb`)."""

    problems: list[VerifyProblem]
    checked: int
    head: tuple[int | None, str | None]
    correlation_of: dict[int, str]
    failures: list[Finding]
    counts: dict[str, int]
    drift: dict[str, _Span]
    expired: _Span | None


def _tally(checker: _Checker, audit: _Audit, correlation_of: dict[int, str]) -> _Tally:
    return _Tally(
        problems=checker.problems,
        checked=checker.checked,
        head=(checker.head_index, checker.head_digest),
        correlation_of=correlation_of,
        failures=audit.failures,
        counts={name: getattr(audit, name) for name in _COUNTS},
        drift=audit.drift,
        expired=audit.expired,
    )


def _absorb(checker: _Checker, audit: _Audit, correlation_of: dict[int, str], tally: _Tally) -> None:
    """Add a later part's findings to the first part's (parts are merged in index order)."""
    checker.problems.extend(tally.problems)
    checker.checked += tally.checked
    if tally.head[0] is not None:
        checker.head_index, checker.head_digest = tally.head
    correlation_of.update(tally.correlation_of)
    audit.failures.extend(tally.failures)
    for name in _COUNTS:
        setattr(audit, name, getattr(audit, name) + tally.counts[name])
    for config_digest, span in tally.drift.items():
        audit.drift[config_digest] = _join(audit.drift.get(config_digest), span)
    audit.drift = dict(sorted(audit.drift.items(), key=lambda item: item[1].first_index))
    if tally.expired is not None:
        audit.expired = _join(audit.expired, tally.expired)


def _join(earlier: _Span | None, later: _Span) -> _Span:
    if earlier is None:
        return later
    return _Span(
        earlier.count + later.count, earlier.first_index, later.last_index, earlier.first_correlation_id
    )


def _note_correlations(
    checker: _Checker, extra: frozenset[int], batch: Sequence[CheckedRow], out: dict[int, str]
) -> None:
    """correlation_id of every row of ``batch`` a chain problem (so far) or ``extra`` is about."""
    wanted = extra | {problem.index for problem in checker.problems}
    if not wanted:
        return
    for item in batch:
        index = int(item.row["index"])
        if index in wanted:
            out.setdefault(index, item.row["correlation_id"])
