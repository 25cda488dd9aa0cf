"""Run parts of a verification in forked processes (one per core), the first part in this one.

Verification is CPU-bound pure Python, so threads do not help; index ranges of the ledger are
independent enough to verify apart (each range links its first event to the recomputed digest
of the event before it, see :func:`turngate.ledger.verify.iter_checked`) and their findings
merge. ``fork`` is used because the parts need the caller's objects (the store, the artifact
store, the configs) without pickling them, and start in milliseconds; it is only safe from a
process with a single thread, which :func:`can_fork` checks. A part whose process fails is
reported as ``None`` so that the caller can run it itself: a crash never loses a check.
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
