"""One index range verified: the chain pass and the per-event checks in one read transaction.

The entry point (:mod:`.run`) splits the scope into ranges and runs them, in this process or in
forked ones (:func:`turngate.audit.forked_ranges.run_ranges`); each range returns a
:class:`RangeTally` that can be pickled back and merged, in index order, into one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import ColumnElement, select

from turngate.artifacts.configs import ConfigLookup
from turngate.artifacts.store import ArtifactStore
from turngate.audit.forked_ranges import Bound
from turngate.audit.verification.configs import ConfigSource
from turngate.audit.verification.decision_checks import DecisionCheck
from turngate.audit.verification.event_cache import MAX_CACHE_EVENTS
from turngate.audit.verification.event_checks import RangeAudit
from turngate.audit.verification.findings import Finding, Span, join_spans
from turngate.ledger import LedgerStore
from turngate.ledger.chain_check import (
    ChainChecker,
    CheckedRow,
    Claim,
    VerifyProblem,
    iter_checked,
    seed_before,
)
from turngate.ledger.schema import StoredRow, events, index_column


@dataclass(frozen=True)
class Plan:
    """What every range of one ``verify_all`` run shares."""

    thread_id: str | None
    since_index: int | None
    last_index: int | None  # the head of the scope when the run started: nothing after it
    whole: bool  # the whole log: indexes from 0, no gaps
    conditions: list[ColumnElement[bool]]
    batch_size: int
    configs: ConfigSource
    snapshot_grace: timedelta | None
    note_indexes: frozenset[int]  # rows whose correlation_id a finding needs (besides chain problems)
    decision_checks: Sequence[DecisionCheck] = ()
    cache_events: int = MAX_CACHE_EVENTS

    def in_scope(self, row: StoredRow) -> bool:
        index = int(row["index"])
        return (
            (self.thread_id is None or row["thread_id"] == self.thread_id)
            and (self.since_index is None or index >= self.since_index)
            and (self.last_index is not None and index <= self.last_index)
        )


@dataclass
class RangeTally:
    """What ranges found: one range's, or several merged in index order (:meth:`absorb`)."""

    problems: list[VerifyProblem] = field(default_factory=list)  # of the chain pass
    checked: int = 0
    head: tuple[int | None, str | None] = (None, None)  # the last event checked, its digest
    correlation_of: dict[int, str] = field(default_factory=dict)  # for the chain problems' findings
    failures: list[Finding] = field(default_factory=list)
    checked_decisions: int = 0
    unchecked_decisions: int = 0
    checked_artifacts: int = 0
    unchecked_artifacts: int = 0
    drift: dict[str, Span] = field(default_factory=dict)
    unchecked: dict[str, Span] = field(default_factory=dict)
    lookups: dict[str, ConfigLookup] = field(default_factory=dict)
    shadows_not_rerun: dict[str, Span] = field(default_factory=dict)
    expired: Span | None = None

    def absorb(self, later: RangeTally) -> None:
        """Add the findings of a later range."""
        self.problems.extend(later.problems)
        self.checked += later.checked
        if later.head[0] is not None:
            self.head = later.head
        self.correlation_of.update(later.correlation_of)
        self.failures.extend(later.failures)
        self.checked_decisions += later.checked_decisions
        self.unchecked_decisions += later.unchecked_decisions
        self.checked_artifacts += later.checked_artifacts
        self.unchecked_artifacts += later.unchecked_artifacts
        for spans, more in (
            (self.drift, later.drift),
            (self.unchecked, later.unchecked),
            (self.shadows_not_rerun, later.shadows_not_rerun),
        ):
            for config_digest, span in more.items():
                spans[config_digest] = join_spans(spans.get(config_digest), span)
        self.drift = dict(sorted(self.drift.items(), key=lambda item: item[1].first_index))
        self.unchecked = dict(sorted(self.unchecked.items(), key=lambda item: item[1].first_index))
        for config_digest, lookup in later.lookups.items():
            self.lookups.setdefault(config_digest, lookup)
        if later.expired is not None:
            self.expired = join_spans(self.expired, later.expired)


def verify_range(
    store: LedgerStore,
    artifacts: ArtifactStore | None,
    plan: Plan,
    bound: Bound,
    claim: Claim | None,
    progress: Callable[[int], None] | None,
) -> RangeTally:
    """The chain pass and the per-event checks of one index range, in one read transaction;
    then the second opinions (which need the store's own reads). ``claim``: the range is on a
    :class:`~turngate.audit.forked_ranges.RangeBoard` and another process may take its end."""
    low, high = bound
    checker = ChainChecker()
    correlation_of: dict[int, str] = {}
    query = select(events).where(*plan.conditions)
    if low is not None:
        query = query.where(index_column >= low)
    if high is not None:
        query = query.where(index_column <= high)
    query = query.order_by(index_column)
    with store.read_connection("verify") as conn:
        audit = RangeAudit(
            store=store,
            conn=conn,
            artifacts=artifacts,
            configs=plan.configs,
            snapshot_grace=plan.snapshot_grace,
            in_scope=plan.in_scope,
            decision_checks=plan.decision_checks,
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
    return RangeTally(
        problems=checker.problems,
        checked=checker.checked,
        head=(checker.head_index, checker.head_digest),
        correlation_of=correlation_of,
        failures=audit.failures,
        checked_decisions=audit.checked_decisions,
        unchecked_decisions=audit.unchecked_decisions,
        checked_artifacts=audit.checked_artifacts,
        unchecked_artifacts=audit.unchecked_artifacts,
        drift=audit.drift,
        unchecked=audit.unchecked,
        lookups=audit.lookups,
        shadows_not_rerun=audit.shadows_not_rerun,
        expired=audit.expired,
    )


def _note_correlations(
    checker: ChainChecker, extra: frozenset[int], batch: Sequence[CheckedRow], out: dict[int, str]
) -> None:
    """correlation_id of every row of ``batch`` a chain problem (so far) or ``extra`` is about."""
    wanted = extra | {problem.index for problem in checker.problems}
    if not wanted:
        return
    for item in batch:
        index = int(item.row["index"])
        if index in wanted:
            out.setdefault(index, item.row["correlation_id"])
