"""Verify's checks of each event, batch by batch, on the rows the chain pass just parsed.

:class:`RangeAudit` runs inside one index range's read transaction: for every DECISION it
recomputes the decision from its stored inputs (b), checks its config (c) and its normative
inputs (d); for every EXECUTION, that an earlier ALLOW stands behind it; for every artifact
pointer the gateway wrote, the stored bytes (e); and for every row, the payload size limit.
Each batch looks up what its checks need in a few queries (:meth:`RangeAudit._prefetch`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection

from turngate.artifacts.configs import ConfigLookup
from turngate.artifacts.store import ArtifactError, ArtifactStore, ArtifactUnavailableError
from turngate.audit.verification.artifact_checks import check_artifact
from turngate.audit.verification.candidates import KEYS_BY_DIGEST, fetch_candidates, read_candidates
from turngate.audit.verification.configs import ConfigSource, stored_config_digest
from turngate.audit.verification.decision_checks import DecisionCheck, VerifiedDecision
from turngate.audit.verification.decision_recompute import verify_decision_reusing
from turngate.audit.verification.event_cache import (
    BY_INDEX,
    MAX_CACHE_EVENTS,
    RECENT_EVENTS,
    EventCache,
    bounded_put,
    read_rows,
)
from turngate.audit.verification.findings import AuditKind, Finding, Span, decision_problem_kind
from turngate.core.context import ContextConfig
from turngate.core.decision import verify_decision
from turngate.core.events import Event, EventKind
from turngate.core.limits import EVENT_PAYLOAD_LIMIT_BYTES
from turngate.core.manifest import ArtifactPointer, parse_pointer
from turngate.core.pointers import server_pointers
from turngate.ledger import LedgerStore
from turngate.ledger.chain_check import CheckedRow, recompute_digest
from turngate.ledger.schema import StoredRow, events

#: INTENTs kept in memory until their DECISION streams by (older ones are looked up again), and
#: DECISIONs until their EXECUTION does.
PENDING_INTENTS = 10_000
#: Recently checked artifact pointers (an artifact referenced twice is hashed once).
CHECKED_ARTIFACTS = 10_000

_BY_CORRELATION = select(events).where(events.c.correlation_id.in_(bindparam("ids", expanding=True)))

#: What an EXECUTION needs of its DECISION: (index, decision, context_digest).
_DecisionSummary = tuple[int, str, Any]


@dataclass
class _Prefetched:
    intents: dict[str, Event | None] = field(default_factory=dict)
    decisions: dict[str, _DecisionSummary] = field(default_factory=dict)
    candidates: dict[str, list[Event]] = field(default_factory=dict)
    normative: dict[str, StoredRow] = field(default_factory=dict)


@dataclass
class RangeAudit:
    """The per-event checks of one index range, and what they found so far."""

    store: LedgerStore
    conn: Connection  # the chain pass's read transaction: every lookup sees its snapshot
    artifacts: ArtifactStore | None
    configs: ConfigSource
    snapshot_grace: timedelta | None
    in_scope: Callable[[StoredRow], bool]
    decision_checks: Sequence[DecisionCheck] = ()
    cache_events: int = MAX_CACHE_EVENTS
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    failures: list[Finding] = field(default_factory=list)
    checked_decisions: int = 0
    unchecked_decisions: int = 0
    checked_artifacts: int = 0
    unchecked_artifacts: int = 0
    artifacts_stopped: bool = False
    # config digest -> DECISIONs under it, not the current config: recomputed with it (drift),
    # or not recomputed (unchecked); how each config was found (or why not).
    drift: dict[str, Span] = field(default_factory=dict)
    unchecked: dict[str, Span] = field(default_factory=dict)
    lookups: dict[str, ConfigLookup] = field(default_factory=dict)
    shadows_not_rerun: dict[str, Span] = field(default_factory=dict)  # policy -> its DECISIONs
    expired: Span | None = None
    # INTENTs whose DECISION has not streamed by yet; DECISIONs whose EXECUTION has not.
    pending_intents: OrderedDict[str, tuple[Mapping[str, Any], dict[str, Any]]] = field(
        default_factory=OrderedDict
    )
    decisions: OrderedDict[str, _DecisionSummary] = field(default_factory=OrderedDict)
    checked_pointers: OrderedDict[tuple[str, str, int], tuple[str, str, str]] = field(
        default_factory=OrderedDict
    )
    # index -> digest recomputed by the chain pass, for the most recent events.
    digests: OrderedDict[int, str] = field(default_factory=OrderedDict)
    events: EventCache = field(init=False)
    # DECISIONs that did not verify on the candidates as of their INTENT: they get the store's
    # own fetch as a second opinion once the read transaction is over (see second_opinions).
    doubtful: list[tuple[int, str, dict[str, Any], Event, ContextConfig, list[str]]] = field(
        default_factory=list
    )

    def __post_init__(self) -> None:
        self.events = self._new_cache()

    def _new_cache(self) -> EventCache:
        return EventCache(
            min(RECENT_EVENTS, self.cache_events), digests=self.digests, grow_to=self.cache_events
        )

    def fail(self, kind: AuditKind, index: int | None, correlation_id: str | None, detail: str) -> None:
        self.failures.append(Finding(kind=kind, index=index, correlation_id=correlation_id, detail=detail))

    # ---- one batch

    def run_batch(self, batch: Sequence[CheckedRow]) -> None:
        rows = [(item.row, item.payload) for item in batch]
        for item in batch:
            if item.digest is not None:
                bounded_put(self.digests, int(item.row["index"]), item.digest, self.events.digest_limit)
        for row, payload in rows:
            self.events.remember(row, payload)
            if payload is not None and row["kind"] == EventKind.INTENT:
                bounded_put(self.pending_intents, row["correlation_id"], (row, payload), PENDING_INTENTS)
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
        for stored in read_rows(conn, _BY_CORRELATION, sorted(missing_intents | set(missing_decisions))):
            event = cache.get(stored)
            if event is None:
                continue
            if event.kind == EventKind.INTENT and event.correlation_id in missing_intents:
                found.intents.setdefault(event.correlation_id, event)
            elif event.kind == EventKind.DECISION and event.correlation_id in missing_decisions:
                found.decisions.setdefault(event.correlation_id, _summary(event))
        self._normative_rows(wanted_digests, found)
        intents = [intent for intent in found.intents.values() if intent is not None]
        found.candidates = read_candidates(conn, intents, cache)
        missing = missing_intents - set(found.intents)
        found.intents.update(dict.fromkeys(missing))
        return found

    def _normative_rows(self, wanted_digests: set[str], found: _Prefetched) -> None:
        """Which rows carry the normative input digests; each row from the stream's recent rows
        if it is there, else read. The digest column is trusted only where the chain pass
        recomputed it (rows in scope); others are digested again."""
        cache, conn = self.events, self.conn
        unread: set[int] = set()
        for key in read_rows(conn, KEYS_BY_DIGEST, sorted(wanted_digests)):
            index = int(key["index"])
            streamed = cache.rows.get(index)
            if streamed is None:
                unread.add(index)
            else:
                found.normative.setdefault(key["digest"], streamed[0])
        # Read as events (cached: the same INTENT is usually a candidate too).
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
        for row in read_rows(conn, BY_INDEX, invalid):  # rows that are no valid event: as stored
            if self.in_scope(row) or recompute_digest(row) == row["digest"]:
                found.normative.setdefault(row["digest"], row)

    # ---- (b), (c), (d)

    def _decision(self, row: Mapping[str, Any], payload: dict[str, Any], found: _Prefetched) -> None:
        index, cid = int(row["index"]), row["correlation_id"]
        summary = (index, str(payload.get("decision")), payload.get("context_digest"))
        bounded_put(self.decisions, cid, summary, PENDING_INTENTS)
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
        lookup = self.configs.lookup(config_digest)
        cfg = lookup.config
        if cfg is None:  # not recomputed: reported as unchecked (and a failure if altered)
            self.unchecked_decisions += 1
            self.lookups.setdefault(config_digest, lookup)
            _add_to_span(self.unchecked, config_digest, index, cid)
            return
        if config_digest != self.configs.current:  # recomputed with an earlier or stored config
            _add_to_span(self.drift, config_digest, index, cid)
            self.lookups.setdefault(config_digest, lookup)
        self.checked_decisions += 1
        candidates = found.candidates.get(cid, [])
        problems = verify_decision_reusing(payload, intent, candidates, cfg, self.digests)
        if not problems:  # its inputs verified: the per-DECISION checks recompute the rest on them
            verified = VerifiedDecision(index, cid, payload, intent, candidates, cfg, self.conn)
            for check in self.decision_checks:
                for kind, detail in check(verified):
                    if kind == AuditKind.SHADOW_NOT_RERUN:
                        _add_to_span(self.shadows_not_rerun, detail, index, cid)
                    else:
                        self.fail(kind, index, cid, detail)
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
                fetched: list[Event] | None = fetch_candidates(self.store, intent)
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

    def _normative_inputs(
        self,
        index: int,
        cid: str,
        payload: Mapping[str, Any],
        normative: Mapping[str, StoredRow],
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
            bounded_put(self.checked_pointers, key, result, CHECKED_ARTIFACTS)
        self.checked_artifacts += 1
        status, detail, retention = result
        if status == "ok":
            return
        if status == "missing" and retention == "snapshot" and self._expired(pointer, row):
            if self.expired is None:
                self.expired = Span(1, index, index, cid)
            else:
                self.expired.add(index)
            return
        kind = AuditKind.ARTIFACT_MISSING if status == "missing" else AuditKind.ARTIFACT_MISMATCH
        self.fail(kind, index, cid, f"{pointer.path}: {detail or status}")

    def _expired(self, pointer: ArtifactPointer, row: Mapping[str, Any]) -> bool:
        if self.snapshot_grace is None:
            return False
        created = _parse_time(pointer.created_at) or _parse_time(row.get("created_at"))
        return created is not None and self.now - created > self.snapshot_grace


def _add_to_span(spans: dict[str, Span], key: str, index: int, correlation_id: str) -> None:
    span = spans.get(key)
    if span is None:
        spans[key] = Span(1, index, index, correlation_id)
    else:
        span.add(index)


def _summary(event: Event) -> _DecisionSummary:
    return (event.index, str(event.payload.get("decision")), event.payload.get("context_digest"))


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
