"""Which events a turn's declared refs may point at: the candidate rules, in one place.

The turn workflow fetches candidates with :meth:`turngate.ledger.LedgerStore.fetch_ref_candidates`;
``turngate verify``, ``turngate replay`` and the what-if runner select them again over the ledger
as it was when the INTENT was recorded (:mod:`turngate.audit.verification.candidates`). Both read
the rows their own way (the store whole rows, verify only key columns first) and hand what they
found to :func:`choose_ref_candidates`, so the rules cannot drift apart:

- every event of the thread whose correlation_id, turn_id or digest is one of the ref ids;
- for a ref id with no match in the thread, at most one event of another thread: the lowest
  index among those whose correlation_id or digest is the ref id and the first one whose turn_id
  is (so that the resolver reports ``CROSS_THREAD_REF`` rather than ``REF_NOT_FOUND``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any, Protocol, TypeVar

from sqlalchemy import Select, bindparam, select

from turngate.ledger.schema import events, index_column


class RefKeys(Protocol):
    """The columns the rules look at (an :class:`~turngate.core.events.Event` has them)."""

    @property
    def index(self) -> int: ...
    @property
    def thread_id(self) -> str: ...
    @property
    def correlation_id(self) -> str: ...
    @property
    def turn_id(self) -> str: ...
    @property
    def digest(self) -> str: ...


K = TypeVar("K", bound=RefKeys)


def choose_ref_candidates(
    thread_id: str,
    ref_ids: Sequence[str],
    found: Iterable[K],
    turn_elsewhere: Callable[[str], K | None],
) -> list[K]:
    """The candidates for ``ref_ids`` declared in ``thread_id``, ordered by index.

    ``found``: at least every visible event whose correlation_id or digest is a ref id (any
    thread) or whose turn_id is one (in ``thread_id``); anything else in it is ignored.
    ``turn_elsewhere(ref)``: the lowest-index visible event of another thread whose turn_id is
    ``ref``, or None. "Visible" is the caller's to decide (one tenant's events, the events
    before an INTENT).
    """
    refs = list(dict.fromkeys(ref_ids))
    wanted = set(refs)
    matches: dict[int, K] = {}
    for item in found:
        if (
            item.correlation_id in wanted
            or item.digest in wanted
            or (item.turn_id in wanted and item.thread_id == thread_id)
        ):
            matches[item.index] = item
    in_thread = {index: item for index, item in matches.items() if item.thread_id == thread_id}
    matched = {
        value for item in in_thread.values() for value in (item.correlation_id, item.turn_id, item.digest)
    }
    result = dict(in_thread)
    for ref in refs:
        if ref in matched:
            continue
        elsewhere = [
            item
            for _, item in sorted(matches.items())
            if item.thread_id != thread_id and ref in (item.correlation_id, item.digest)
        ][:1]
        by_turn = turn_elsewhere(ref)
        if by_turn is not None:
            elsewhere.append(by_turn)
        if elsewhere:
            first = min(elsewhere, key=lambda item: item.index)
            result[first.index] = first
    return [result[index] for index in sorted(result)]


@lru_cache(maxsize=4)
def turn_elsewhere_statement(*, in_tenant: bool, before: bool) -> Select[Any]:
    """The lowest-index event with turn_id ``:ref`` outside thread ``:thread`` (of tenant
    ``:tenant`` with ``in_tenant``; below index ``:before`` with ``before``): one probe of the
    turn_id index. Built once per variant (then served from SQLAlchemy's statement cache)."""
    statement = select(events).where(
        events.c.turn_id == bindparam("ref"), events.c.thread_id != bindparam("thread")
    )
    if in_tenant:  # a tenant's refs never reach another tenant's events
        statement = statement.where(events.c.tenant_id == bindparam("tenant"))
    if before:
        statement = statement.where(index_column < bindparam("before"))
    return statement.order_by(index_column).limit(1)
