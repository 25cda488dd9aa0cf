"""``verify_all``: plan a verification, run its index ranges, merge them into one report."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from functools import partial

from sqlalchemy import ColumnElement, func, select

from turngate.artifacts.local import LocalArtifactStore
from turngate.artifacts.store import ArtifactStore
from turngate.audit.forked_ranges import Bound, process_count, run_ranges, split_ranges
from turngate.audit.gc_passes import with_fewer_gc_passes
from turngate.audit.verification.config_findings import config_findings
from turngate.audit.verification.configs import ConfigSource, config_map
from turngate.audit.verification.decision_checks import (
    DecisionCheck,
    redaction_note,
    shadow_entries,
    spend_plan,
)
from turngate.audit.verification.event_cache import MAX_CACHE_EVENTS
from turngate.audit.verification.findings import AuditKind, AuditReport, Finding, ProgressFn
from turngate.audit.verification.ranges import Plan, RangeTally, verify_range
from turngate.core.context import ContextConfig
from turngate.ledger import LedgerStore
from turngate.ledger.chain_check import DEFAULT_BATCH_SIZE, ChainChecker, check_duplicate_keys
from turngate.ledger.schema import events, index_column

#: Below this many events in scope, one process (forking costs more than it saves).
PARALLEL_MIN_EVENTS = 4_000

#: What is recomputed on every DECISION whose recorded inputs verified, in this order (see
#: :mod:`turngate.audit.verification.decision_checks`): add a check here.
DECISION_CHECKS: tuple[DecisionCheck, ...] = (shadow_entries, spend_plan, redaction_note)


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
    allow_unchecked: bool = False,
) -> AuditReport:
    """Verify the ledger (or ``thread_id``'s events, or the indexes ``since_index..until_index``).

    ``artifacts=None`` skips the artifact checks (a ``artifacts_not_checked`` warning says how
    many pointers were seen). ``known_configs`` are earlier context configs: a DECISION pinned to
    one of them, or to a config stored in ``artifacts`` under its digest
    (:mod:`turngate.artifacts.configs`), is recomputed with it (``config_drift`` info); one whose
    config cannot be had is not recomputed: counted in ``unchecked_decisions``, with a
    ``config_unavailable`` finding per config, and the report is not ok unless
    ``allow_unchecked``. A missing
    ``snapshot``-retention artifact older than ``snapshot_grace`` is ``expired_snapshot`` info
    (gc deletes those); without ``snapshot_grace`` it is a failure like any missing artifact.
    ``progress(done, total)`` is called after every batch; ``total`` is twice the number of
    events in scope (each event is digested and chain-checked, then its decision and artifact
    checks run: one pass does both, batch by batch). ``workers``: processes to verify index
    ranges in (default: one per core for a scope of at least :data:`PARALLEL_MIN_EVENTS` events
    when forking is safe, see :mod:`turngate.audit.forked_ranges`); the report is the same
    either way. ``cache_events`` (default :data:`MAX_CACHE_EVENTS`): at most this many recent
    events each process keeps parsed (memory for speed: the cache starts at
    :data:`~turngate.audit.verification.event_cache.RECENT_EVENTS` and grows only when a turn
    names an event it has let go; a DECISION whose refs reach further back than
    ``cache_events`` reads them again).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if cache_events is None:
        cache_events = MAX_CACHE_EVENTS
    elif cache_events < 0:
        raise ValueError("cache_events must not be negative")
    started = time.perf_counter()
    conditions = _conditions(thread_id, since_index, until_index)
    duplicates = ChainChecker()
    with store.read_connection("verify") as conn:
        count, last = conn.execute(
            select(func.count(), func.max(index_column)).select_from(events).where(*conditions)
        ).one()
        in_scope, last_index = int(count), (None if last is None else int(last))
        # Duplicate keys first, over the whole scope: the ranges then know which rows need a
        # correlation_id in the report.
        check_duplicate_keys(conn, conditions, duplicates)
        parts = _process_count(store, artifacts, in_scope, workers)
        bounds: list[Bound] = (
            [(None, last_index)]
            if parts <= 1 or last_index is None
            else split_ranges(conn, conditions, in_scope, None, last_index, parts)
        )
    configs = ConfigSource(config_map(context_config, known_configs), artifacts)
    plan = Plan(
        thread_id=thread_id,
        since_index=since_index,
        last_index=last_index,
        whole=thread_id is None and since_index is None and until_index is None,
        conditions=conditions,
        batch_size=batch_size,
        configs=configs,
        snapshot_grace=snapshot_grace,
        note_indexes=frozenset(problem.index for problem in duplicates.problems),
        decision_checks=DECISION_CHECKS,
        cache_events=cache_events,
    )

    def report_progress(done: int) -> None:
        if progress is not None:
            # Each event counts twice (digests and chain, then decisions and artifacts): one
            # pass does both, batch by batch.
            progress(min(2 * done, 2 * in_scope), 2 * in_scope)

    results = run_ranges(
        bounds,
        partial(verify_range, store, artifacts, plan),
        min_steal=max(1, batch_size // 4),
        progress=report_progress,
        # A forked child must not touch the parent's pooled connections: a pool of its own.
        in_child=lambda: store.engine.dispose(close=False),
    )
    tally = RangeTally()
    for _low, part in results:
        tally.absorb(part)
    tally.problems.extend(duplicates.problems)
    if len(bounds) > 1:
        report_progress(tally.checked)

    current_digest = configs.current
    chain_findings = [
        Finding(
            kind=AuditKind(problem.kind.value),
            index=problem.index,
            correlation_id=tally.correlation_of.get(problem.index),
            detail=problem.detail
            + (
                f" (expected {problem.expected}, found {problem.found})"
                if problem.expected or problem.found
                else ""
            ),
        )
        for problem in tally.problems
    ]
    warnings, info, failures = _summaries(tally, artifacts is not None, snapshot_grace)
    drift_info, unchecked, config_failures = config_findings(
        tally.drift, tally.unchecked, tally.lookups, current_digest
    )
    failures = sorted(
        chain_findings + tally.failures + failures + config_failures,
        key=lambda f: (f.index if f.index is not None else -1, f.kind.value),
    )
    elapsed = time.perf_counter() - started
    return AuditReport(
        ok=not failures and (allow_unchecked or not tally.unchecked_decisions),
        thread_id=thread_id,
        since_index=since_index,
        until_index=until_index,
        checked_events=tally.checked,
        checked_decisions=tally.checked_decisions,
        unchecked_decisions=tally.unchecked_decisions,
        allow_unchecked=allow_unchecked,
        checked_artifacts=tally.checked_artifacts,
        failures=failures,
        unchecked=unchecked,
        warnings=warnings,
        info=drift_info + info,
        head_index=tally.head[0],
        head_digest=tally.head[1],
        context_config_digest=current_digest,
        duration_ms=round(elapsed * 1000),
        events_per_s=round(tally.checked / elapsed, 1) if elapsed > 0 else 0.0,
    )


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


def _process_count(
    store: LedgerStore, artifacts: ArtifactStore | None, in_scope: int, workers: int | None
) -> int:
    """:func:`~turngate.audit.forked_ranges.process_count`; one where the artifact store is a
    network client (its sockets must not be shared with a child)."""
    if artifacts is not None and not isinstance(artifacts, LocalArtifactStore):
        return 1
    return process_count(store, in_scope, workers, min_parallel=PARALLEL_MIN_EVENTS)


def _summaries(
    tally: RangeTally, checked_artifacts: bool, snapshot_grace: timedelta | None
) -> tuple[list[Finding], list[Finding], list[Finding]]:
    """(warnings, info, failures) that sum up the whole scope: expired snapshots, shadow entries
    not re-run, artifact pointers not checked (the configs: :mod:`.config_findings`)."""
    warnings: list[Finding] = []
    info: list[Finding] = []
    failures: list[Finding] = []
    expired = tally.expired
    if expired is not None:
        info.append(
            Finding(
                kind=AuditKind.EXPIRED_SNAPSHOT,
                index=expired.first_index,
                correlation_id=expired.first_correlation_id,
                detail=(
                    f"{expired.count} snapshot artifact(s) referenced from index "
                    f"{expired.first_index}..{expired.last_index} are gone and older than "
                    f"the grace period {snapshot_grace}: collected by gc, as expected"
                ),
            )
        )
    for policy, span in tally.shadows_not_rerun.items():
        warnings.append(
            Finding(
                kind=AuditKind.SHADOW_NOT_RERUN,
                index=span.first_index,
                correlation_id=span.first_correlation_id,
                detail=(
                    f"{span.count} DECISION(s) (index {span.first_index}..{span.last_index}) hold a "
                    f"shadow entry of {policy}, not re-run: that policy does not load here "
                    "(configure it as a shadow policy to check these entries)"
                ),
            )
        )
    if tally.unchecked_artifacts and not checked_artifacts:
        warnings.append(
            Finding(
                kind=AuditKind.ARTIFACTS_NOT_CHECKED,
                index=None,
                detail=(
                    f"{tally.unchecked_artifacts} artifact pointer(s) not checked: no artifact store given"
                ),
            )
        )
    elif tally.unchecked_artifacts > 1:
        failures.append(
            Finding(
                kind=AuditKind.ARTIFACT_UNAVAILABLE,
                index=None,
                detail=(
                    f"{tally.unchecked_artifacts} artifact pointer(s) not checked: the artifact store failed"
                ),
            )
        )
    return warnings, info, failures
