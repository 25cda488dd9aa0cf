"""Ledger verification: recompute every digest and every chain link, report every problem.

The verifier reads the stored columns and payload of each event, recomputes its digest with the
same core code that sealed it (:func:`turngate.core.events.event_digest`) and never trusts the
stored ``digest`` column except as the value to compare against. It streams through the log in
index order (one read snapshot, ``batch_size`` rows in memory at a time), so it checks every
event however large the ledger is. It reports; it never repairs or re-links anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.engine import Connection

from turngate.core.events import EventDraft, event_digest
from turngate.ledger.schema import events, index_column
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


class _Unreadable(ValueError):
    """A stored row whose digest cannot even be recomputed (payload is not a JSON object)."""


def recompute_digest(row: Mapping[str, Any]) -> str:
    """The digest of a stored row, computed from its columns and payload alone."""
    try:
        payload = json.loads(row["payload"])
    except (TypeError, ValueError) as exc:
        raise _Unreadable(f"payload is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise _Unreadable("payload is not a JSON object")
    # model_construct: no validation, so a tampered value (e.g. an unknown kind) still gets
    # digested, and then differs from the stored digest, instead of crashing the verifier.
    draft = EventDraft.model_construct(
        kind=row["kind"],
        thread_id=row["thread_id"],
        turn_id=row["turn_id"],
        parent_turn_id=row["parent_turn_id"],
        correlation_id=row["correlation_id"],
        stream_id=row["stream_id"],
        lane=row["lane"],
        actor=row["actor"],
        intent_type=row["intent_type"],
        payload=payload,
    )
    return event_digest(draft, int(row["index"]), row["prev_event_digest"])


class _Checker:
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

    def digest_of(self, row: Mapping[str, Any]) -> str | None:
        """Recompute, record a digest_mismatch if it differs; None if it cannot be computed."""
        index = int(row["index"])
        self.checked += 1
        try:
            recomputed = recompute_digest(row)
        except _Unreadable as exc:
            self.add(ProblemKind.DIGEST_MISMATCH, index, str(exc), found=row["digest"])
            return None
        if recomputed != row["digest"]:
            self.add(
                ProblemKind.DIGEST_MISMATCH,
                index,
                "stored digest differs from the digest recomputed from the stored event",
                expected=recomputed,
                found=row["digest"],
            )
        self.head_index, self.head_digest = index, recomputed
        return recomputed

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


def _batches(conn: Connection, query: Select[Any], batch_size: int) -> Iterator[list[Any]]:
    result = conn.execute(query.execution_options(yield_per=batch_size)).mappings()
    for partition in result.partitions(batch_size):
        yield list(partition)


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
    checker = _Checker()
    conditions: list[ColumnElement[bool]] = []
    if thread_id is not None:
        conditions.append(events.c.thread_id == thread_id)
    query = select(events).where(*conditions).order_by(index_column)
    with store.read_connection("verify") as conn:
        if thread_id is None:
            _verify_all(conn, query, checker, progress, batch_size)
        else:
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


def _verify_all(
    conn: Connection,
    query: Select[Any],
    checker: _Checker,
    progress: Callable[[int], None] | None,
    batch_size: int,
) -> None:
    expected_index = 0
    previous: tuple[int, str | None, bool] | None = None  # index, recomputed digest, computable
    for batch in _batches(conn, query, batch_size):
        for row in batch:
            index = int(row["index"])
            recomputed = checker.digest_of(row)
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
        if progress is not None:
            progress(checker.checked)


def _verify_thread(
    conn: Connection,
    query: Select[Any],
    checker: _Checker,
    progress: Callable[[int], None] | None,
    batch_size: int,
) -> None:
    last: tuple[int, str | None] | None = None  # last thread event seen: index, recomputed
    for batch in _batches(conn, query, batch_size):
        known: dict[int, str | None] = {}
        if last is not None:
            known[last[0]] = last[1]
        known.update({int(row["index"]): None for row in batch})  # filled in below
        wanted = sorted({int(row["index"]) - 1 for row in batch if int(row["index"]) > 0} - set(known))
        predecessors = _recompute_predecessors(conn, wanted)
        previous_index: int | None = last[0] if last is not None else None
        for row in batch:
            index = int(row["index"])
            recomputed = checker.digest_of(row)
            if previous_index == index:
                checker.add(ProblemKind.DUPLICATE, index, f"index {index} occurs more than once")
                continue
            known[index] = recomputed
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
        if batch:
            tail_index = int(batch[-1]["index"])
            last = (tail_index, known.get(tail_index))
        if progress is not None:
            progress(checker.checked)


def _recompute_predecessors(conn: Connection, indexes: list[int]) -> dict[int, tuple[bool, str | None]]:
    """index -> (row exists, recomputed digest or None if it cannot be computed)."""
    found: dict[int, tuple[bool, str | None]] = {i: (False, None) for i in indexes}
    for start in range(0, len(indexes), 500):
        chunk = indexes[start : start + 500]
        for row in conn.execute(select(events).where(index_column.in_(chunk))).mappings():
            try:
                found[int(row["index"])] = (True, recompute_digest(row))
            except _Unreadable:
                found[int(row["index"])] = (True, None)
    return found


def _check_duplicate_keys(conn: Connection, conditions: list[ColumnElement[bool]], checker: _Checker) -> None:
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
