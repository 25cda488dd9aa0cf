"""The ledger's chain check: recompute every digest and every chain link, report every problem.

The verifier reads the stored columns and payload of each event, recomputes its digest over the
scope that :func:`turngate.core.events.event_digest_scope` defines (see
:mod:`turngate.ledger.row_digest`: byte-identical to ``event_digest``) and never trusts the
stored ``digest`` column except as the value to compare against. It streams through the log in
index order (one read snapshot, ``batch_size`` rows in memory at a time), so it checks every
event however large the ledger is. It reports; it never repairs or re-links anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.engine import Connection

from turngate.ledger.row_digest import RowDigester, UnreadableRow
from turngate.ledger.schema import StoredRow, events, index_column
from turngate.ledger.store import LedgerStore

DEFAULT_BATCH_SIZE = 1000


class ProblemKind(StrEnum):
    DIGEST_MISMATCH = "digest_mismatch"
    """The digest recomputed from the stored row differs from the stored digest."""
    CHAIN_BREAK = "chain_break"
    """``prev_event_digest`` differs from the recomputed digest of the event at index - 1."""
    INDEX_GAP = "index_gap"
    """Indexes are missing (the log must start at 0 and have no gaps)."""
    DUPLICATE = "duplicate"
    """An index, or a (correlation_id, kind) key, occurs more than once."""


class VerifyProblem(BaseModel):
    kind: ProblemKind
    index: int
    detail: str
    expected: str | None = None
    found: str | None = None


class VerifyReport(BaseModel):
    ok: bool
    checked: int = Field(description="events whose digest was recomputed")
    thread_id: str | None = None
    head_index: int | None = Field(None, description="index of the last event checked")
    head_digest: str | None = Field(None, description="recomputed digest of the last event checked")
    problems: list[VerifyProblem] = Field(default_factory=list)


@dataclass(slots=True)
class CheckedRow:
    """A stored row after the chain pass: its columns, its parsed payload (None when it is not a
    JSON object) and the digest recomputed from it (None when it cannot be computed)."""

    row: dict[str, Any]
    payload: dict[str, Any] | None
    digest: str | None


_DIGESTERS: dict[tuple[str, ...], RowDigester] = {}


def _digester(columns: Sequence[str]) -> RowDigester:
    key = tuple(columns)
    if key not in _DIGESTERS:
        _DIGESTERS[key] = RowDigester(key)
    return _DIGESTERS[key]


def recompute_digest(row: StoredRow) -> str:
    """The digest of a stored row, computed from its columns and payload alone."""
    return digest_row(row)[0]


def digest_row(row: StoredRow) -> tuple[str, dict[str, Any]]:
    """The digest of a stored row and its parsed payload (raises :class:`UnreadableRow`)."""
    columns = tuple(row.keys())
    return _digester(columns).digest(tuple(row[name] for name in columns))


class ChainChecker:
    """The chain checks' running state: problems found, events checked, the last one's digest.
    :func:`iter_checked` drives it; ``turngate verify`` (:mod:`turngate.audit.verification`)
    runs one per index range and merges their problems."""

    def __init__(self) -> None:
        self.problems: list[VerifyProblem] = []
        self.checked = 0
        self.head_index: int | None = None
        self.head_digest: str | None = None

    def add(
        self,
        kind: ProblemKind,
        index: int,
        detail: str,
        expected: str | None = None,
        found: str | None = None,
    ) -> None:
        self.problems.append(
            VerifyProblem(kind=kind, index=index, detail=detail, expected=expected, found=found)
        )

    def check(self, digester: RowDigester, values: Sequence[Any]) -> CheckedRow:
        """Recompute, record a digest_mismatch if it differs (or cannot be computed)."""
        row = dict(zip(digester.columns, values, strict=True))
        index = int(row["index"])
        self.checked += 1
        try:
            recomputed, payload = digester.digest(values)
        except UnreadableRow as exc:
            self.add(ProblemKind.DIGEST_MISMATCH, index, str(exc), found=row["digest"])
            return CheckedRow(row, None, None)
        if recomputed != row["digest"]:
            self.add(
                ProblemKind.DIGEST_MISMATCH,
                index,
                "stored digest differs from the digest recomputed from the stored event",
                expected=recomputed,
                found=row["digest"],
            )
        self.head_index, self.head_digest = index, recomputed
        return CheckedRow(row, payload, recomputed)

    def link(self, row: Mapping[str, Any], previous_digest: str | None) -> None:
        """Check ``row``'s prev_event_digest against the recomputed digest of index - 1."""
        index = int(row["index"])
        if row["prev_event_digest"] != previous_digest:
            what = (
                "the first event must have no prev_event_digest"
                if index == 0
                else (f"prev_event_digest differs from the recomputed digest of event {index - 1}")
            )
            self.add(
                ProblemKind.CHAIN_BREAK,
                index,
                what,
                expected=previous_digest,
                found=row["prev_event_digest"],
            )


#: ``claim(last)``: the stream is about to check rows up to index ``last``; returns the highest
#: index it may check (rows above it are another reader's now, and the stream ends there).
Claim = Callable[[int], int]


def _batches(
    conn: Connection, query: Select[Any], batch_size: int, claim: Claim | None = None
) -> Iterator[tuple[RowDigester, Sequence[Any]]]:
    """Plain row tuples, ``batch_size`` at a time (streamed: never the whole result in memory),
    in index order; with ``claim``, each batch is claimed before it is yielded."""
    result = conn.execute(query.execution_options(yield_per=batch_size))
    digester = _digester(tuple(result.keys()))
    at = digester.columns.index("index")
    for partition in result.partitions(batch_size):
        if claim is not None:
            last = int(partition[-1][at])
            allowed = claim(last)
            if allowed < last:
                kept = [values for values in partition if int(values[at]) <= allowed]
                if kept:
                    yield digester, kept
                return
        yield digester, partition


def verify_ledger(
    store: LedgerStore,
    *,
    thread_id: str | None = None,
    progress: Callable[[int], None] | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> VerifyReport:
    """Verify the whole ledger, or (``thread_id``) one thread's events and their chain links.

    Whole ledger: every digest, every link, indexes start at 0 without gaps, no duplicate index
    or (correlation_id, kind). One thread: the thread's digests, and each event's link to the
    recomputed digest of the event before it (wherever that event belongs).

    ``progress`` is called with the running count of checked events after every batch. A
    truncated tail cannot be seen from inside the log: compare ``head_index``/``head_digest``
    with a head recorded elsewhere for that.
    """
    checker = ChainChecker()
    conditions: list[ColumnElement[bool]] = []
    if thread_id is not None:
        conditions.append(events.c.thread_id == thread_id)
    query = select(events).where(*conditions).order_by(index_column)
    with store.read_connection("verify") as conn:
        batches = iter_checked(conn, query, checker, whole=thread_id is None, batch_size=batch_size)
        for _batch in batches:
            if progress is not None:
                progress(checker.checked)
        check_duplicate_keys(conn, conditions, checker)
    problems = sorted(checker.problems, key=lambda p: (p.index, p.kind.value))
    return VerifyReport(
        ok=not problems,
        checked=checker.checked,
        thread_id=thread_id,
        head_index=checker.head_index,
        head_digest=checker.head_digest,
        problems=problems,
    )


#: Where a stream of the whole log resumes: (next expected index, (index, recomputed digest,
#: computable) of the event before it or None).
Seed = tuple[int, tuple[int, str | None, bool] | None]


def seed_before(conn: Connection, index: int) -> Seed:
    """The :data:`Seed` to verify the whole log from ``index`` on, as if streamed from 0: the
    last event before ``index`` (its digest recomputed) and the index expected after it."""
    result = conn.execute(select(events).where(index_column < index).order_by(index_column.desc()).limit(1))
    digester = _digester(tuple(result.keys()))
    values = result.first()
    if values is None:
        return 0, None
    found = int(values[digester.columns.index("index")])
    try:
        recomputed: str | None = digester.digest(values)[0]
    except UnreadableRow:
        recomputed = None
    return found + 1, (found, recomputed, recomputed is not None)


def iter_checked(
    conn: Connection,
    query: Select[Any],
    checker: ChainChecker,
    *,
    whole: bool,
    batch_size: int,
    seed: Seed = (0, None),
    claim: Claim | None = None,
) -> Iterator[list[CheckedRow]]:
    """Run the chain checks over ``query``'s rows (index order) and yield each batch, checked,
    so that a caller can run more checks on the parsed rows without reading them again.

    ``whole``: the query is the whole log (indexes from 0, no gaps, each event linked to the one
    before it in the stream, ``seed`` saying where the stream starts); otherwise a subset (a
    thread, a range) whose events are linked to the recomputed digest of index - 1 wherever
    that event is. ``claim``: see :data:`Claim` (a range that other processes may take the end
    of; the stream stops where its claim is cut).
    """
    if whole:
        return _verify_all(conn, query, checker, batch_size, seed, claim)
    return _verify_thread(conn, query, checker, batch_size, claim)


def _verify_all(
    conn: Connection,
    query: Select[Any],
    checker: ChainChecker,
    batch_size: int,
    seed: Seed,
    claim: Claim | None,
) -> Iterator[list[CheckedRow]]:
    expected_index, previous = seed  # previous: index, recomputed digest, computable
    for digester, batch in _batches(conn, query, batch_size, claim):
        checked = [checker.check(digester, values) for values in batch]
        for item in checked:
            row = item.row
            index = int(row["index"])
            recomputed = item.digest
            if previous is not None and index == previous[0]:
                checker.add(ProblemKind.DUPLICATE, index, f"index {index} occurs more than once")
                continue
            if index < expected_index:
                checker.add(
                    ProblemKind.INDEX_GAP,
                    index,
                    f"index {index} is out of order (expected {expected_index} or later)",
                )
            elif index > expected_index:
                missing = (
                    str(expected_index) if index - expected_index == 1 else f"{expected_index}..{index - 1}"
                )
                checker.add(
                    ProblemKind.INDEX_GAP,
                    expected_index,
                    f"missing index {missing} (event {index} follows)",
                    expected=str(expected_index),
                    found=str(index),
                )
            elif index == 0:
                checker.link(row, None)
            elif previous is not None and previous[2]:
                checker.link(row, previous[1])
            previous = (index, recomputed, recomputed is not None)
            expected_index = max(expected_index, index + 1)
        yield checked


def _verify_thread(
    conn: Connection, query: Select[Any], checker: ChainChecker, batch_size: int, claim: Claim | None
) -> Iterator[list[CheckedRow]]:
    last: tuple[int, str | None] | None = None  # last thread event seen: index, recomputed
    for digester, batch in _batches(conn, query, batch_size, claim):
        checked = [checker.check(digester, values) for values in batch]
        known: dict[int, str | None] = {}
        if last is not None:
            known[last[0]] = last[1]
        indexes = {int(item.row["index"]) for item in checked}
        wanted = sorted({i - 1 for i in indexes if i > 0} - indexes - set(known))
        predecessors = _recompute_predecessors(conn, wanted)
        previous_index: int | None = last[0] if last is not None else None
        for item in checked:
            row = item.row
            index = int(row["index"])
            if previous_index == index:
                checker.add(ProblemKind.DUPLICATE, index, f"index {index} occurs more than once")
                continue
            known[index] = item.digest
            previous_index = index
            if index == 0:
                checker.link(row, None)
                continue
            if index - 1 in predecessors:
                present, digest_value = predecessors[index - 1]
            else:
                present, digest_value = True, known.get(index - 1)
            if not present:
                checker.add(
                    ProblemKind.INDEX_GAP,
                    index - 1,
                    f"event {index - 1}, the predecessor of thread event {index}, is missing",
                )
            elif digest_value is not None:
                checker.link(row, digest_value)
        if checked:
            tail_index = int(checked[-1].row["index"])
            last = (tail_index, known.get(tail_index))
        yield checked


def _recompute_predecessors(conn: Connection, indexes: list[int]) -> dict[int, tuple[bool, str | None]]:
    """index -> (row exists, recomputed digest or None if it cannot be computed)."""
    found: dict[int, tuple[bool, str | None]] = {i: (False, None) for i in indexes}
    for start in range(0, len(indexes), 500):
        chunk = indexes[start : start + 500]
        result = conn.execute(select(events).where(index_column.in_(chunk)))
        digester = _digester(tuple(result.keys()))
        for values in result:
            index = int(values[digester.columns.index("index")])
            try:
                found[index] = (True, digester.digest(values)[0])
            except UnreadableRow:
                found[index] = (True, None)
    return found


def check_duplicate_keys(
    conn: Connection, conditions: list[ColumnElement[bool]], checker: ChainChecker
) -> None:
    """A ``duplicate`` problem for every event whose (correlation_id, kind) an earlier event in
    scope already has (one query over the unique key, whatever the scope's size)."""
    keys = conn.execute(
        select(events.c.correlation_id, events.c.kind)
        .where(*conditions)
        .group_by(events.c.correlation_id, events.c.kind)
        .having(func.count() > 1)
    ).all()
    for correlation_id, kind in keys:
        indexes = conn.scalars(
            select(index_column)
            .where(events.c.correlation_id == correlation_id, events.c.kind == kind)
            .order_by(index_column)
        ).all()
        for index in indexes[1:]:
            checker.add(
                ProblemKind.DUPLICATE,
                int(index),
                f"(correlation_id, kind) = ({correlation_id!r}, {kind}) already recorded at "
                f"index {indexes[0]}",
            )
