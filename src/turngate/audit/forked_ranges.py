"""Ledger index ranges run in forked processes (one per core), the first range in this one.

``turngate verify`` and ``turngate policy whatif`` are CPU-bound pure Python, so threads do not
help; index ranges of the ledger are independent enough to run apart (verify links a range's
first event to the recomputed digest of the event before it, see
:func:`turngate.ledger.chain_check.iter_checked`) and their results merge. :func:`run_ranges` is
the one loop both use: split, hand out, rebalance, run a failed process's ranges again here.
``fork`` is used because the ranges need the caller's objects (the store, the artifact store,
the configs) without pickling them, and start in milliseconds; it is only safe from a process
with a single thread, which :func:`can_fork` checks. A range whose process fails is run again
in this one: a crash never loses a check.

Work is not spread evenly over a ledger's indexes (a thread's first turn declares no refs, a
DENY has no EXECUTION), so equal ranges finish at different times. :class:`RangeBoard` lets a
process that is done take the unclaimed upper half of the largest range left.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable, MutableSequence, Sequence
from functools import partial
from multiprocessing.connection import Connection
from typing import Any, TypeVar, cast

from sqlalchemy import ColumnElement, select
from sqlalchemy.engine import Connection as DbConnection

from turngate.ledger.chain_check import Claim
from turngate.ledger.engine import (
    is_sqlite_memory,
)
from turngate.ledger.schema import index_column
from turngate.ledger.store import (
    LedgerStore,
)

T = TypeVar("T")
U = TypeVar("U")
R = TypeVar("R")


def usable_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def can_fork() -> bool:
    """True where forking is safe: the platform has ``fork`` and this process runs one thread
    (a fork copies locks that other threads may hold; the API server calls verify from a thread
    pool, so it always verifies in one process)."""
    return (
        "fork" in multiprocessing.get_all_start_methods()
        and threading.active_count() == 1
        and threading.current_thread() is threading.main_thread()
    )


def shared_counters(count: int) -> MutableSequence[int]:
    """``count`` integers that forked children can write and this process can read (progress)."""
    # A raw shared array of C longs; the stubs type an array made from a type code as Any.
    return cast(MutableSequence[int], multiprocessing.get_context("fork").Array("q", count, lock=False))


def run_forked(here: Callable[[], U], jobs: Sequence[Callable[[], T]]) -> tuple[U, list[T | None]]:
    """Start every job in a forked child, run ``here`` in this process meanwhile, and return
    ``here``'s result with each child's (``None`` for a child that failed or died)."""
    context = multiprocessing.get_context("fork")
    children: list[tuple[Any, Connection]] = []
    try:
        for job in jobs:
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(target=_child, args=(job, writer), daemon=True)
            process.start()
            writer.close()
            children.append((process, reader))
        mine = here()
    except BaseException:
        for process, _reader in children:
            process.terminate()
        raise
    results: list[T | None] = []
    for process, reader in children:
        try:
            results.append(reader.recv())
        except (EOFError, OSError):
            results.append(None)
        finally:
            reader.close()
        process.join()
    return mine, results


def _child(job: Callable[[], Any], writer: Connection) -> None:
    try:
        result = job()
    except BaseException:  # the parent runs the part itself
        result = None
    try:
        writer.send(result)
    finally:
        writer.close()


#: A range as the board hands it out: (slot, low, high), inclusive; low None: unbounded below.
Range = tuple[int, int | None, int]


class RangeBoard:
    """Index ranges verified by several processes, in shared memory (create it before forking).

    Each range has an owner that streams it in index order and claims it batch by batch
    (:meth:`claim`). A process that has finished its ranges takes the upper half of the range
    with the most unclaimed indexes (:meth:`steal`), so that the processes finish together
    however unevenly the work lies in the ledger (early turns without refs cost less than
    later ones, say). Every index belongs to exactly one range at any moment, and a range is
    only ever cut above what its owner has claimed.
    """

    _WIDTH = 4  # per slot: low (-1: unbounded below), high, claimed through, owner

    def __init__(
        self, bounds: Sequence[tuple[int | None, int]], *, min_steal: int, capacity: int = 64
    ) -> None:
        context = multiprocessing.get_context("fork")
        self._lock = context.Lock()
        self._cells: MutableSequence[int] = context.Array("q", capacity * self._WIDTH, lock=False)
        self._used = context.Value("q", 0, lock=False)
        self.capacity = capacity
        self.min_steal = max(1, min_steal)
        for owner, (low, high) in enumerate(bounds):
            self._add(-1 if low is None else low, high, owner)

    def _add(self, low: int, high: int, owner: int) -> int:
        slot: int = self._used.value
        at = slot * self._WIDTH
        self._cells[at : at + self._WIDTH] = [low, high, low - 1, owner]
        self._used.value = slot + 1
        return slot

    def _range(self, slot: int) -> Range:
        at = slot * self._WIDTH
        low, high = self._cells[at], self._cells[at + 1]
        return slot, (None if low < 0 else low), high

    def first(self, owner: int) -> Range:
        """The range ``owner`` starts with (slot ``owner``)."""
        with self._lock:
            return self._range(owner)

    def claim(self, slot: int, last: int) -> int:
        """The owner of ``slot`` is about to check indexes up to ``last``: returns the highest
        index it may check (lower than ``last`` when another process took the rest)."""
        at = slot * self._WIDTH
        with self._lock:
            high = self._cells[at + 1]
            self._cells[at + 2] = max(self._cells[at + 2], min(last, high))
            return high

    def finish(self, slot: int) -> None:
        """The owner of ``slot`` has checked every row of it (its stream ended): nothing is left
        to take."""
        at = slot * self._WIDTH
        with self._lock:
            self._cells[at + 2] = self._cells[at + 1]

    def steal(self, owner: int) -> Range | None:
        """A new range for ``owner``: the upper half of the unclaimed part of the range with the
        most left, if that is at least twice ``min_steal`` indexes (else None: not worth a cold
        start)."""
        with self._lock:
            used = self._used.value
            if used >= self.capacity:
                return None
            best, left = -1, 0
            for slot in range(used):
                at = slot * self._WIDTH
                unclaimed = self._cells[at + 1] - self._cells[at + 2]
                if unclaimed > left:
                    best, left = slot, unclaimed
            if best < 0 or left < 2 * self.min_steal:
                return None
            at = best * self._WIDTH
            middle = self._cells[at + 2] + left // 2
            high = self._cells[at + 1]
            self._cells[at + 1] = middle
            slot = self._add(middle + 1, high, owner)
            return self._range(slot)

    def ranges_of(self, owner: int) -> list[Range]:
        """Every range ``owner`` holds now (to verify again if its process failed)."""
        with self._lock:
            return [
                self._range(slot)
                for slot in range(self._used.value)
                if self._cells[slot * self._WIDTH + 3] == owner
            ]


# --------------------------------------------------------------------------- the range loop

#: An index range (inclusive; low None: unbounded below, high None: an empty scope).
Bound = tuple[int | None, int | None]
#: ``run_range(bound, claim, progress)``: run one range; ``claim`` (None: the whole range is this
#: process's) cuts it short when another process takes its end (see :data:`Claim`);
#: ``progress(count)`` gets the running count of items the range has done.
RunRange = Callable[[Bound, Claim | None, Callable[[int], None]], R]


def process_count(store: LedgerStore, in_scope: int, workers: int | None, *, min_parallel: int) -> int:
    """How many processes: ``workers`` if given, else one per core for at least ``min_parallel``
    items in scope; never more than there are items; one where forking is unsafe or cannot share
    the store (in-memory SQLite)."""
    wanted = workers if workers is not None else (usable_cores() if in_scope >= min_parallel else 1)
    wanted = max(1, min(wanted, in_scope))
    if wanted == 1 or is_sqlite_memory(store.engine.url) or not can_fork():
        return 1
    return wanted


def split_ranges(
    conn: DbConnection,
    conditions: Sequence[ColumnElement[bool]],
    count: int,
    first: int | None,
    last: int,
    parts: int,
) -> list[Bound]:
    """``parts`` index ranges from ``first`` to ``last`` with about as many of the ``count`` rows
    that ``conditions`` select each (fewer ranges when rows share a start)."""
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
    lows: list[int | None] = [first]
    lows.extend(starts)
    highs: list[int | None] = [start - 1 for start in starts]
    highs.append(last)
    return list(zip(lows, highs, strict=True))


def run_ranges(
    bounds: Sequence[Bound],
    run_range: RunRange[R],
    *,
    min_steal: int,
    progress: Callable[[int], None] | None = None,
    in_child: Callable[[], None] | None = None,
) -> list[tuple[int | None, R]]:
    """Run every range, and return ``(low, result)`` for each range run, in index order.

    One range runs here. More are handed out on a :class:`RangeBoard` to this process and one
    forked child per further range; a process that is done takes the upper half of the largest
    range left (at least ``2 * min_steal`` indexes). ``in_child`` runs first in each child (a
    forked child must not use the parent's pooled connections). A child's results are pickled
    back; the ranges of a child that failed are run again here, whole. ``progress(done)``, in
    this process, gets the running count over every process.
    """
    if len(bounds) <= 1:
        note = progress or (lambda _done: None)
        return [(bound[0], run_range(bound, None, note)) for bound in bounds]
    board = RangeBoard([(low, high) for low, high in bounds if high is not None], min_steal=min_steal)
    done = shared_counters(len(bounds))

    def ranges_of(owner: int) -> list[tuple[int | None, R]]:
        results: list[tuple[int | None, R]] = []
        before = 0
        taken: Range | None = board.first(owner)
        while taken is not None:
            slot, low, high = taken
            reached = [0]

            def note(count: int, before: int = before, reached: list[int] = reached) -> None:
                reached[0] = count
                done[owner] = before + count
                if owner == 0 and progress is not None:
                    progress(sum(done))

            results.append((low, run_range((low, high), partial(board.claim, slot), note)))
            board.finish(slot)
            before += reached[0]
            taken = board.steal(owner)
        return results

    jobs = [partial(child_ranges, ranges_of, in_child, owner) for owner in range(1, len(bounds))]
    mine, theirs = run_forked(partial(ranges_of, 0), jobs)
    pieces = list(mine)
    for owner, result in enumerate(theirs, start=1):
        if result is None:  # a crash never loses a range: its ranges run here, whole
            result = [
                (low, run_range((low, high), None, lambda _done: None))
                for _slot, low, high in board.ranges_of(owner)
            ]
        pieces.extend(result)
    return sorted(pieces, key=lambda piece: -1 if piece[0] is None else piece[0])


def child_ranges(
    ranges_of: Callable[[int], list[tuple[int | None, R]]], in_child: Callable[[], None] | None, owner: int
) -> list[tuple[int | None, R]]:
    """What a forked child runs: ``owner``'s ranges (then the ones it takes)."""
    if in_child is not None:
        in_child()
    return ranges_of(owner)
