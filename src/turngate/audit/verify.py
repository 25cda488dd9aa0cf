"""Full verification of a ledger: chain, decisions, observation split and artifacts.

:func:`verify_all` checks, for the whole ledger or a thread or an index range:

a. every event digest recomputed from its stored row, every chain link and index gap: this is
   :func:`turngate.ledger.verify_ledger` (or, for an index range, the same checker driven over a
   range query inside one :meth:`LedgerStore.read_connection`);
b. every DECISION recomputed from stored inputs with :func:`turngate.core.decision.verify_decision`:
   the INTENT of the same correlation_id and the candidate events of its declared refs, selected
   by the rules of ``store.fetch_ref_candidates`` (the turn workflow's call) over the ledger as it
   was when the INTENT was recorded (:func:`read_candidates`; three ``IN`` queries per batch
   instead of one store call per DECISION). A DECISION that does not verify on those gets a
   second opinion from ``store.fetch_ref_candidates`` itself before it is reported;
c. ``boundary.context_config_digest`` against the configs the verifier knows (the current one
   first): a DECISION made under another config is a ``config_drift`` warning, not a failure,
   and its context digest cannot be recomputed without that config;
d. ``normative_input_digests`` name earlier INTENT events only (seed 000: no observation leaked);
e. every artifact pointer found anywhere in any payload is re-hashed by the artifact store.

The ledger is streamed twice in index order, ``batch_size`` rows at a time (the chain pass, then
the decision and artifact pass in short read transactions, keyset-paginated): memory stays flat
in the size of the ledger, and nothing is capped. It reports; it never repairs anything.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field, ValidationError
from sqlalchemy import ColumnElement, Select, bindparam, func, select, tuple_
from sqlalchemy.engine import Connection

from turngate.artifacts.store import ArtifactError, ArtifactStore, ArtifactUnavailableError
from turngate.core.context import ContextConfig, context_config_digest
from turngate.core.decision import verify_decision
from turngate.core.events import Event, EventKind
from turngate.core.manifest import ArtifactPointer
from turngate.core.refs import ref_lookup_ids
from turngate.ledger import LedgerStore, VerifyReport, verify_ledger
from turngate.ledger.schema import EVENT_COLUMNS, events, index_column
from turngate.ledger.store import IN_CHUNK
from turngate.ledger.verify import (
    DEFAULT_BATCH_SIZE,
    _check_duplicate_keys,
    _Checker,
    _verify_thread,
    recompute_digest,
)

#: Keys that make a JSON object an artifact pointer (``created_at`` is optional).
POINTER_KEYS: frozenset[str] = frozenset({"artifact_id", "path", "sha256", "size_bytes"})
#: INTENTs kept in memory until their DECISION streams by (older ones are looked up again).
PENDING_INTENTS = 10_000
#: Recently checked artifact pointers (an artifact referenced twice is hashed once).
CHECKED_ARTIFACTS = 10_000


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
#: A stored row and its parsed payload (``None`` when the payload is not a JSON object).
_Row = tuple[Mapping[str, Any], dict[str, Any] | None]


# --------------------------------------------------------------------------- shared helpers


def iter_pointers(value: Any) -> Iterator[Mapping[str, Any]]:
    """Every JSON object in ``value`` that is an artifact pointer (has every key of
    :data:`POINTER_KEYS`), depth first; a pointer's own fields are not searched further."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.keys() >= POINTER_KEYS:
                yield item
                continue
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))


def parse_pointer(raw: Mapping[str, Any]) -> ArtifactPointer:
    """The pointer's known fields, validated (raises ``ValidationError``)."""
    return ArtifactPointer.model_validate({k: raw[k] for k in ArtifactPointer.model_fields if k in raw})


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
    values = {name: row[name] for name in EVENT_COLUMNS}
    values["payload"] = payload
    return Event.model_validate(values)


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
_BY_DIGEST = select(events).where(events.c.digest.in_(bindparam("ids", expanding=True)))
_BY_THREAD_TURN = select(events).where(
    tuple_(events.c.thread_id, events.c.turn_id).in_(bindparam("ids", expanding=True))
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


def _rows(conn: Connection, statement: Select[Any], ids: Sequence[Any]) -> Iterator[Mapping[str, Any]]:
    for start in range(0, len(ids), IN_CHUNK):
        yield from conn.execute(statement, {"ids": list(ids[start : start + IN_CHUNK])}).mappings()


class _EventCache:
    """Rows turned into events once per batch (a row that does not parse is skipped: the chain
    pass reports it)."""

    def __init__(self) -> None:
        self.by_index: dict[int, Event | None] = {}

    def get(self, row: Mapping[str, Any]) -> Event | None:
        index = int(row["index"])
        if index not in self.by_index:
            try:
                payload = json.loads(row["payload"])
                self.by_index[index] = event_from(row, payload) if isinstance(payload, dict) else None
            except (TypeError, ValueError):
                self.by_index[index] = None
        return self.by_index[index]


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
    pairs = sorted({(intent.thread_id, ref) for intent, refs in wanted for ref in refs})
    matching: dict[str, list[Event]] = {}
    seen: set[tuple[str, int]] = set()
    for statement, column, ids in (
        (_BY_CORRELATION, "correlation_id", ref_ids),
        (_BY_DIGEST, "digest", ref_ids),
        (_BY_THREAD_TURN, "turn_id", pairs),
    ):
        for row in _rows(conn, statement, ids):
            event = cache.get(row)
            key = (row[column], int(row["index"]))
            if event is not None and key not in seen:
                seen.add(key)
                matching.setdefault(row[column], []).append(event)

    def turn_elsewhere(ref: str, thread_id: str, before: int) -> Event | None:
        row = (
            conn.execute(_TURN_ELSEWHERE, {"ref": ref, "thread": thread_id, "before": before})
            .mappings()
            .first()
        )
        return None if row is None else cache.get(row)

    return {
        intent.correlation_id: select_candidates(intent, refs, matching, turn_elsewhere)
        for intent, refs in wanted
    }


def select_candidates(
    intent: Event,
    ref_ids: Sequence[str],
    matching: Mapping[str, Sequence[Event]],
    turn_elsewhere: Callable[[str, str, int], Event | None],
) -> list[Event]:
    """The rules of ``store.fetch_ref_candidates(intent.thread_id, ref_ids)`` applied to the
    ledger as it was when the INTENT was recorded (the events before it): every event of the
    thread whose correlation_id, turn_id or digest is a ref id; for a ref id that matches nothing
    in the thread, the lowest-index matching event of another thread.

    ``matching``: ref id -> the events whose correlation_id or digest is that id (any thread) or
    whose turn_id is that id (in the intent's thread); ``turn_elsewhere(ref, thread_id, before)``:
    the lowest-index event of another thread with that turn_id before ``before``.

    Why "as of the INTENT": today's fetch also sees later events, and a later in-thread match
    hides the cross-thread candidate that made the DECISION a ``CROSS_THREAD_REF``.
    """
    thread_id = intent.thread_id
    found: dict[int, Event] = {}
    for ref in ref_ids:
        for event in matching.get(ref, ()):
            if event.index >= intent.index:
                continue
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
        by_turn = turn_elsewhere(ref, thread_id, intent.index)
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
    artifacts: ArtifactStore | None
    configs: dict[str, ContextConfig]
    current_digest: str
    snapshot_grace: timedelta | None
    in_scope: Callable[[Mapping[str, Any]], bool]
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
    pending_intents: dict[str, tuple[Mapping[str, Any], dict[str, Any]]] = field(default_factory=dict)
    decisions: dict[str, tuple[int, str, Any]] = field(default_factory=dict)
    checked_pointers: dict[tuple[str, str, int], tuple[str, str, str]] = field(default_factory=dict)

    def fail(self, kind: AuditKind, index: int | None, correlation_id: str | None, detail: str) -> None:
        self.failures.append(Finding(kind=kind, index=index, correlation_id=correlation_id, detail=detail))

    # ---- one batch

    def run_batch(self, rows: Sequence[_Row]) -> None:
        for row, payload in rows:
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
            for raw in iter_pointers(payload):
                self._pointer(row, raw)

    def _prefetch(self, rows: Sequence[_Row]) -> _Prefetched:
        """One read transaction per batch for everything the batch's checks look up: INTENTs and
        DECISIONs not seen in the stream, the events named by normative_input_digests, and the
        candidates for every declared ref (three ``IN`` queries instead of one
        ``fetch_ref_candidates`` call per DECISION)."""
        found = _Prefetched()
        decided = {
            row["correlation_id"] for row, p in rows if p is not None and row["kind"] == EventKind.DECISION
        }
        missing_intents: list[str] = []
        wanted_digests: set[str] = set()
        for row, payload in rows:
            if payload is None or row["kind"] != EventKind.DECISION:
                continue
            cid = row["correlation_id"]
            cached = self.pending_intents.pop(cid, None)
            if cached is None:
                missing_intents.append(cid)
            else:
                found.intents[cid] = _event_or_none(*cached)
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
        cache = _EventCache()
        with self.store.read_connection("audit") as conn:
            for row in _rows(conn, _BY_CORRELATION, sorted(set(missing_intents) | set(missing_decisions))):
                event = cache.get(row)
                if event is None:
                    continue
                if event.kind == EventKind.INTENT and event.correlation_id in missing_intents:
                    found.intents.setdefault(event.correlation_id, event)
                elif event.kind == EventKind.DECISION and event.correlation_id in missing_decisions:
                    found.decisions.setdefault(event.correlation_id, _decision_summary(event))
            for row in _rows(conn, _BY_DIGEST, sorted(wanted_digests)):
                # The digest column is trusted only where the chain pass recomputed it.
                if self.in_scope(row) or recompute_digest(row) == row["digest"]:
                    found.normative.setdefault(row["digest"], row)
            intents = [intent for intent in found.intents.values() if intent is not None]
            found.candidates = read_candidates(conn, intents, cache)
        missing = set(missing_intents) - set(found.intents)
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
                "the DECISION has no boundary.context_config_digest (seed 000 invariant 3)",
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
        problems = verify_decision(payload, intent, found.candidates.get(cid, []), cfg)
        # A second opinion: the candidates as the store fetches them today (exactly the
        # workflow's call). Either set reproducing the DECISION verifies it.
        if (
            problems
            and cid in found.candidates
            and not verify_decision(payload, intent, self._fetch(intent), cfg)
        ):
            problems = []
        for problem in problems:
            self.fail(decision_problem_kind(problem), index, cid, problem)

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
                    "only INTENT payloads may inform governance (seed 000)",
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
                check = self.artifacts.check(pointer)
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
            result = (check.status, check.detail or "", check.retention or "")
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


def _bounded_put(mapping: dict[Any, Any], key: Any, value: Any, limit: int | None = None) -> None:
    """Insert, forgetting the oldest entry first when ``mapping`` holds ``limit`` entries
    (default :data:`PENDING_INTENTS`): memory stays flat in the size of the ledger."""
    mapping.pop(key, None)
    if len(mapping) >= (PENDING_INTENTS if limit is None else limit):
        del mapping[next(iter(mapping))]
    mapping[key] = value


def _event_or_none(row: Mapping[str, Any], payload: dict[str, Any]) -> Event | None:
    try:
        return event_from(row, payload)
    except ValidationError:
        return None


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


def _chain_pass(
    store: LedgerStore,
    *,
    thread_id: str | None,
    since_index: int | None,
    until_index: int | None,
    progress: Callable[[int], None] | None,
    batch_size: int,
) -> VerifyReport:
    """(a): :func:`verify_ledger` for the whole ledger or a thread; for an index range, the same
    checker (recomputed digests, each event linked to the recomputed digest of index - 1 wherever
    that event is, missing predecessors as gaps, duplicate keys) over a range query."""
    if since_index is None and until_index is None:
        return verify_ledger(store, thread_id=thread_id, progress=progress, batch_size=batch_size)
    checker = _Checker()
    conditions = _conditions(thread_id, since_index, until_index)
    query = select(events).where(*conditions).order_by(index_column)
    with store.read_connection("verify") as conn:
        _verify_thread(conn, query, checker, progress, batch_size)
        _check_duplicate_keys(conn, conditions, checker)
    problems = sorted(checker.problems, key=lambda p: (p.index, p.kind.value))
    return VerifyReport(
        ok=not problems,
        checked=checker.checked,
        thread_id=thread_id,
        head_index=checker.head_index,
        head_digest=checker.head_digest,
        problems=problems,
    )


def _parsed(row: Mapping[str, Any]) -> _Row:
    try:
        payload = json.loads(row["payload"])
    except (TypeError, ValueError):
        return row, None
    return row, payload if isinstance(payload, dict) else None


def _read_batches(
    store: LedgerStore, conditions: list[ColumnElement[bool]], last_index: int, batch_size: int
) -> Iterator[list[_Row]]:
    """Rows with their parsed payloads, in index order up to ``last_index``: keyset pages, each
    in its own short read transaction (the checks of a page may call the store in between)."""
    after = -1
    while after < last_index:
        with store.read_connection("audit") as conn:
            rows = [
                _parsed(row)
                for row in conn.execute(
                    select(events)
                    .where(*conditions, index_column > after, index_column <= last_index)
                    .order_by(index_column)
                    .limit(batch_size)
                ).mappings()
            ]
        if not rows:
            return
        yield rows
        after = int(rows[-1][0]["index"])


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
) -> AuditReport:
    """Verify the ledger (or ``thread_id``'s events, or the indexes ``since_index..until_index``).

    ``artifacts=None`` skips the artifact checks (a ``artifacts_not_checked`` warning says how
    many pointers were seen). ``known_configs`` are earlier context configs: a DECISION pinned to
    one of them is recomputed with it instead of being reported as ``config_drift``. A missing
    ``snapshot``-retention artifact older than ``snapshot_grace`` is ``expired_snapshot`` info
    (gc deletes those); without ``snapshot_grace`` it is a failure like any missing artifact.
    ``progress(done, total)`` is called after every batch; ``total`` is twice the number of events
    in scope (each event is visited by the chain pass, then by the decision/artifact pass).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    started = time.perf_counter()
    conditions = _conditions(thread_id, since_index, until_index)
    with store.read_connection("audit") as conn:
        in_scope_count = int(
            conn.execute(select(func.count()).select_from(events).where(*conditions)).scalar_one()
        )
    total = 2 * in_scope_count

    def chain_progress(checked: int) -> None:
        if progress is not None:
            progress(min(checked, in_scope_count), total)

    chain = _chain_pass(
        store,
        thread_id=thread_id,
        since_index=since_index,
        until_index=until_index,
        progress=chain_progress,
        batch_size=batch_size,
    )

    def in_scope(row: Mapping[str, Any]) -> bool:
        index = int(row["index"])
        return (
            (thread_id is None or row["thread_id"] == thread_id)
            and (since_index is None or index >= since_index)
            and (chain.head_index is not None and index <= chain.head_index)
        )

    configs = config_map(context_config, known_configs)
    audit = _Audit(
        store=store,
        artifacts=artifacts,
        configs=configs,
        current_digest=next(iter(configs)),
        snapshot_grace=snapshot_grace,
        in_scope=in_scope,
    )
    correlation_of: dict[int, str] = {}
    problem_indexes = {problem.index for problem in chain.problems}
    scanned = 0
    if chain.head_index is not None:
        for rows in _read_batches(store, conditions, chain.head_index, batch_size):
            audit.run_batch(rows)
            scanned += len(rows)
            for row, _payload in rows:
                if int(row["index"]) in problem_indexes:
                    correlation_of[int(row["index"])] = row["correlation_id"]
            if progress is not None:
                progress(min(in_scope_count + scanned, total), total)
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
        for problem in chain.problems
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
        checked_events=chain.checked,
        checked_decisions=audit.checked_decisions,
        unverified_decisions=audit.unverified_decisions,
        checked_artifacts=audit.checked_artifacts,
        failures=failures,
        warnings=audit.warnings,
        info=audit.info,
        head_index=chain.head_index,
        head_digest=chain.head_digest,
        context_config_digest=audit.current_digest,
        duration_ms=round(elapsed * 1000),
        events_per_s=round(chain.checked / elapsed, 1) if elapsed > 0 else 0.0,
    )
