"""Run parts of a verification in forked processes (one per core), the first part in this one.

Verification is CPU-bound pure Python, so threads do not help; index ranges of the ledger are
independent enough to verify apart (each range links its first event to the recomputed digest
of the event before it, see :func:`turngate.ledger.verify.iter_checked`) and their findings
merge. ``fork`` is used because the parts need the caller's objects (the store, the artifact
store, the configs) without pickling them, and start in milliseconds; it is only safe from a
process with a single thread, which :func:`can_fork` checks. A part whose process fails is
reported as ``None`` so that the caller can run it itself: a crash never loses a check.

Work is not spread evenly over a ledger's indexes (a thread's first turn declares no refs, a
DENY has no EXECUTION), so equal ranges finish at different times. :class:`RangeBoard` lets a
process that is done take the unclaimed upper half of the largest range left.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable, MutableSequence, Sequence
from multiprocessing.connection import Connection
from typing import Any, TypeVar

T = TypeVar("T")
U = TypeVar("U")


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
    return multiprocessing.get_context("fork").Array("q", count, lock=False)  # type: ignore[return-value]


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
        self._cells: MutableSequence[int] = context.Array("q", capacity * self._WIDTH, lock=False)  # type: ignore[assignment]
        self._used = context.Value("q", 0, lock=False)
        self.capacity = capacity
        self.min_steal = max(1, min_steal)
        for owner, (low, high) in enumerate(bounds):
            self._add(-1 if low is None else low, high, owner)

    def _add(self, low: int, high: int, owner: int) -> int:
        slot = self._used.value
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
