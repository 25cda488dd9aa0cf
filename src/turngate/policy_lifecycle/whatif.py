"""What-if over the ledger: every recorded DECISION in a selection, decided again by a candidate.

The ledger's DECISIONs in scope are streamed in index order, ``batch_size`` at a time inside one
read transaction. For each batch, their INTENTs are read in one query and the candidate events
of the INTENTs' declared refs with :func:`turngate.audit.verification.candidates.read_candidates`
(the rules the turn workflow's fetch applied, over the ledger as it was when each INTENT was
recorded: the inputs verify recomputes DECISIONs on). Each turn is then decided again by
:func:`turngate.core.whatif.redecide`. Only flips, errors and counts are kept: memory stays flat
in the size of the ledger. A large selection is split into index ranges run in forked processes,
by the same loop as `turngate verify` (:func:`turngate.audit.forked_ranges.run_ranges`).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial

from pydantic import BaseModel, Field, field_validator
from sqlalchemy import ColumnElement, Select, and_, func, select
from sqlalchemy.engine import Connection

from turngate.audit.forked_ranges import Bound, process_count, run_ranges, split_ranges
from turngate.audit.gc_passes import with_fewer_gc_passes
from turngate.audit.verification.candidates import read_candidates
from turngate.audit.verification.configs import config_map, stored_config_digest
from turngate.core.context import ContextConfig
from turngate.core.events import Event, EventKind
from turngate.core.policy import LoadedPolicy
from turngate.core.whatif import Change, Verdict, redecide
from turngate.ledger import LedgerStore
from turngate.ledger.chain_check import Claim
from turngate.ledger.rows import (
    event_from_row,
)
from turngate.ledger.schema import events, index_column

#: DECISIONs per batch (one INTENT query and three candidate key lookups each).
BATCH_SIZE = 500
#: Below this many DECISIONs in scope one process does it all (forking costs more than it saves).
PARALLEL_MIN_DECISIONS = 2_000
#: Distinct (decision, reason codes) pairs a part shares between its flips.
SHARED_VERDICTS = 1_000
#: Unreproducible turns listed by correlation id (all are counted).
LISTED_UNREPRODUCIBLE = 100

ProgressFn = Callable[[int, int], None]


def utc_moment(moment: datetime) -> datetime:
    """``moment`` in UTC (a moment without a zone is UTC), so that any two compare; ValueError
    when UTC cannot hold it (``0001-01-01T00:00:00+14:00`` is in year 0)."""
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    try:
        return aware.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{moment.isoformat()} is outside the years 1 to 9999 in UTC") from None


class WhatIfQuery(BaseModel):
    """Which recorded turns to decide again (every filter optional; all of them must hold)."""

    thread_id: str | None = None
    tenant_id: str | None = None
    since: datetime | None = None  # DECISIONs recorded at or after this moment
    until: datetime | None = None  # ... and at or before this one

    @field_validator("since", "until")
    @classmethod
    def _in_utc(cls, moment: datetime | None) -> datetime | None:
        return None if moment is None else utc_moment(moment)


class Flip(BaseModel):
    """One turn the candidate decides otherwise."""

    correlation_id: str
    thread_id: str
    turn_id: str
    index: int  # the DECISION's ledger index
    change: Change
    recorded: Verdict
    candidate: Verdict
    error: dict[str, str] | None = None
    budget_review: int | None = None  # the budget that sent the recorded turn to review


class PolicyErrorItem(BaseModel):
    """An INTENT on which the candidate raised (``policy.error``); the run went on."""

    correlation_id: str
    thread_id: str
    index: int
    code: str
    detail: str


class WhatIfReport(BaseModel):
    policy: dict[str, str]
    query: WhatIfQuery
    checked: int = 0
    flipped: list[Flip] = Field(default_factory=list)
    #: candidate reason code -> how many flips carry it
    by_reason: dict[str, int] = Field(default_factory=dict)
    #: change -> how many turns
    by_change: dict[str, int] = Field(default_factory=dict)
    errors: list[PolicyErrorItem] = Field(default_factory=list)
    #: DECISIONs made under a context config this process does not know (not decided again)
    config_unknown: int = 0
    #: DECISIONs whose recorded inputs did not recompute, or that have no INTENT before them
    unreproducible: int = 0
    unreproducible_ids: list[str] = Field(default_factory=list)
    #: checked turns that a budget sent to review (their recorded verdict is the policy's ALLOW)
    budget_reviewed: int = 0
    duration_ms: int = 0

    @property
    def decisions_per_s(self) -> float:
        return self.checked / max(self.duration_ms / 1000, 1e-9)


def _timestamp(moment: datetime) -> str:
    """``moment`` as the ledger writes ``created_at`` (UTC, microseconds, ``Z``), so that text
    comparison orders as time does."""
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _conditions(query: WhatIfQuery) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = [events.c.kind == str(EventKind.DECISION)]
    if query.thread_id is not None:
        conditions.append(events.c.thread_id == query.thread_id)
    if query.tenant_id is not None:
        conditions.append(events.c.tenant_id == query.tenant_id)
    if query.since is not None:
        conditions.append(events.c.created_at >= _timestamp(query.since))
    if query.until is not None:
        conditions.append(events.c.created_at <= _timestamp(query.until))
    return conditions


@dataclass
class _Part:
    """What one index range found, in a form a child process can send back."""

    checked: int = 0
    flips: list[Flip] = field(default_factory=list)
    errors: list[PolicyErrorItem] = field(default_factory=list)
    config_unknown: int = 0
    unreproducible: int = 0
    unreproducible_ids: list[str] = field(default_factory=list)
    budget_reviewed: int = 0
    # One Verdict object per distinct (decision, reasons): a report of many flips shares them
    # (and so does its pickle from a forked process).
    verdicts: dict[tuple[str, tuple[str, ...]], Verdict] = field(default_factory=dict)

    def shared(self, verdict: Verdict) -> Verdict:
        key = (verdict.decision, tuple(verdict.reason_codes))
        if key not in self.verdicts and len(self.verdicts) >= SHARED_VERDICTS:
            return verdict
        return self.verdicts.setdefault(key, verdict)

    def note_unreproducible(self, correlation_id: str) -> None:
        self.unreproducible += 1
        if len(self.unreproducible_ids) < LISTED_UNREPRODUCIBLE:
            self.unreproducible_ids.append(correlation_id)


def _intents(conn: Connection, correlation_ids: Sequence[str]) -> dict[str, Event]:
    rows = conn.execute(
        select(events).where(
            events.c.kind == str(EventKind.INTENT), events.c.correlation_id.in_(list(correlation_ids))
        )
    ).mappings()
    return {row["correlation_id"]: event_from_row(row) for row in rows}


def _run_part(
    store: LedgerStore,
    policy: LoadedPolicy,
    configs: dict[str, ContextConfig],
    conditions: list[ColumnElement[bool]],
    batch_size: int,
    bound: Bound,
    claim: Claim | None,
    progress: Callable[[int], None],
) -> _Part:
    """The DECISIONs of one index range, batch by batch in one read transaction. ``claim(last)``
    (a range on a :class:`~turngate.audit.forked_ranges.RangeBoard`) returns how far this range
    still reaches before a batch is decided: another process may have taken its upper end."""
    part = _Part()
    low, high = bound
    if high is None:  # an empty scope
        return part
    with store.read_connection("policy whatif") as conn:
        after = (low or 0) - 1
        while after < high:
            statement: Select[tuple[object, ...]] = (
                select(events)
                .where(*conditions, and_(index_column > after, index_column <= high))
                .order_by(index_column)
                .limit(batch_size)
            )
            rows = [dict(row) for row in conn.execute(statement).mappings()]
            if not rows:
                break
            after = int(rows[-1]["index"])
            if claim is not None:
                high = claim(after)
                rows = [row for row in rows if int(row["index"]) <= high]
            _run_batch(conn, rows, policy, configs, part)
            progress(part.checked + part.config_unknown + part.unreproducible)
    return part


def _run_batch(
    conn: Connection,
    rows: Sequence[dict[str, object]],
    policy: LoadedPolicy,
    configs: dict[str, ContextConfig],
    part: _Part,
) -> None:
    intents = _intents(conn, [str(row["correlation_id"]) for row in rows])
    candidates = read_candidates(conn, list(intents.values()))
    for row in rows:
        cid, index = str(row["correlation_id"]), int(row["index"])  # type: ignore[call-overload]
        stored = json.loads(str(row["payload"]))
        intent = intents.get(cid)
        if intent is None or intent.index >= index:
            part.note_unreproducible(cid)
            continue
        cfg = configs.get(stored_config_digest(stored) or "")
        if cfg is None:
            part.config_unknown += 1
            continue
        again = redecide(stored, intent, candidates.get(cid, []), cfg, policy)
        if again.unreproducible is not None or again.candidate is None:
            part.note_unreproducible(cid)
            continue
        part.checked += 1
        part.budget_reviewed += again.budget_review is not None
        if again.error is not None:
            part.errors.append(
                PolicyErrorItem(
                    correlation_id=cid,
                    thread_id=intent.thread_id,
                    index=index,
                    code=again.error["code"],
                    detail=again.error["detail"],
                )
            )
        if again.change != Change.SAME:
            part.flips.append(
                Flip(
                    correlation_id=cid,
                    thread_id=intent.thread_id,
                    turn_id=intent.turn_id,
                    index=index,
                    change=again.change,
                    recorded=part.shared(again.recorded),
                    candidate=part.shared(again.candidate),
                    error=again.error,
                    budget_review=again.budget_review,
                )
            )


def _process_count(store: LedgerStore, in_scope: int, workers: int | None) -> int:
    return process_count(store, in_scope, workers, min_parallel=PARALLEL_MIN_DECISIONS)


@with_fewer_gc_passes
def run_whatif(
    store: LedgerStore,
    policy: LoadedPolicy,
    *,
    context_config: ContextConfig,
    query: WhatIfQuery | None = None,
    known_configs: Sequence[ContextConfig] = (),
    workers: int | None = None,
    batch_size: int = BATCH_SIZE,
    progress: ProgressFn | None = None,
) -> WhatIfReport:
    """Decide every recorded turn in ``query`` again with ``policy`` and report what changes.

    A DECISION pinned to a context config other than ``context_config`` and ``known_configs``
    is counted in ``config_unknown`` (its inputs cannot be rebuilt). ``progress(done, total)``
    counts DECISIONs. ``workers``: processes (default: one per core for
    :data:`PARALLEL_MIN_DECISIONS` DECISIONs or more, where forking is safe).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    started = time.perf_counter()
    query = query or WhatIfQuery()
    conditions = _conditions(query)
    configs = config_map(context_config, known_configs)
    with store.read_connection("policy whatif") as conn:
        total, low, high = conn.execute(
            select(func.count(), func.min(index_column), func.max(index_column)).where(*conditions)
        ).one()
        total = int(total or 0)
        processes = _process_count(store, total, workers)
        bounds: list[Bound] = (
            [] if not total else split_ranges(conn, conditions, total, int(low), int(high), processes)
        )

    def report_progress(done: int) -> None:
        if progress is not None:
            progress(done, total)

    results = run_ranges(
        bounds,
        partial(_run_part, store, policy, configs, conditions, batch_size),
        min_steal=batch_size,
        progress=report_progress,
        in_child=lambda: store.engine.dispose(close=False),  # not the parent's pooled connections
    )
    parts = [part for _low, part in results]
    report = _merge(policy, query, parts)
    report.duration_ms = int((time.perf_counter() - started) * 1000)
    if progress is not None:
        progress(total, total)
    return report


def _merge(policy: LoadedPolicy, query: WhatIfQuery, parts: Sequence[_Part]) -> WhatIfReport:
    report = WhatIfReport(policy=policy.describe(), query=query)
    by_reason: Counter[str] = Counter()
    by_change: Counter[str] = Counter()
    for part in parts:
        report.checked += part.checked
        report.flipped.extend(part.flips)
        report.errors.extend(part.errors)
        report.config_unknown += part.config_unknown
        report.budget_reviewed += part.budget_reviewed
        report.unreproducible += part.unreproducible
        room = LISTED_UNREPRODUCIBLE - len(report.unreproducible_ids)
        report.unreproducible_ids.extend(part.unreproducible_ids[: max(0, room)])
        for flip in part.flips:
            by_change[flip.change.value] += 1
            by_reason.update(flip.candidate.reason_codes)
    report.flipped.sort(key=lambda flip: flip.index)
    report.errors.sort(key=lambda item: item.index)
    report.by_reason = dict(sorted(by_reason.items()))
    report.by_change = dict(sorted(by_change.items()))
    return report
