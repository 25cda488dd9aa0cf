"""Request-size-driven CPU work, run off the event loop: in worker processes of its own.

Checking a large JSON body's depth, parsing and validating it, reading a long thread and matching
a long history against it all grow with what one request sends. On the event loop they would hold
every other request (any tenant's) for as long as they run. A thread is not enough: the regular
expression and the JSON parser keep the interpreter lock for their whole call, so the loop's
thread would still wait behind them. So they run in :data:`CPU_WORKERS` separate processes
(started on first use, with ``spawn``, at a lower CPU priority), where extra work queues, and one
key's calls take at most :data:`PER_KEY` of them: one key's heavy calls cost that key time, not
everyone's.

What runs there is a module-level function of picklable arguments; an :class:`AdmissionError`
it raises is raised again here. The ledger is opened in the worker from its URL
(:func:`worker_ledger`). A worker exits when the API process that started it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import multiprocessing
import os
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from turngate.core.events import AdmissionError
from turngate.ledger import LedgerStore
from turngate.ledger.engine import is_sqlite_memory

P = ParamSpec("P")
T = TypeVar("T")

#: Worker processes per API process: work beyond them waits its turn.
CPU_WORKERS = 2
#: Worker processes one key's calls may hold at once (fewer than CPU_WORKERS).
PER_KEY = 1
#: Ledgers a worker keeps open (one per ledger URL it was asked to read).
WORKER_LEDGERS = 4
#: Added to a worker's niceness: its work waits while the event loop's thread wants the CPU.
WORKER_NICENESS = 10
_PARENT_POLL_S = 1.0

_lock = threading.Lock()
_processes: ProcessPoolExecutor | None = None
_threads: ThreadPoolExecutor | None = None


@dataclass(frozen=True)
class _Refused:
    """An :class:`AdmissionError` on its way back from a worker (its constructor does not
    match its ``args``, so it is not pickled as itself)."""

    reason_code: str
    detail: str
    field: str | None


def _process_pool() -> ProcessPoolExecutor:
    global _processes
    with _lock:
        if _processes is None:
            _processes = ProcessPoolExecutor(
                max_workers=CPU_WORKERS,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(os.getpid(),),
            )
        return _processes


def _thread_pool() -> ThreadPoolExecutor:
    global _threads
    with _lock:
        if _threads is None:
            _threads = ThreadPoolExecutor(max_workers=CPU_WORKERS, thread_name_prefix="turngate-cpu")
        return _threads


def _forget_broken(pool: Executor) -> None:
    global _processes
    with _lock:
        if _processes is pool:
            _processes = None


def _start_worker(parent: int) -> None:
    """In a worker: yield the CPU to the API process (its event loop answers everyone), and exit
    once the API process is gone (a killed parent closes no pipe here)."""
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="turngate-cpu-parent", daemon=True).start()


def _run(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    try:
        return fn(*args)
    except AdmissionError as exc:
        return _Refused(exc.reason_code, exc.detail, exc.field)


class _PerKey:
    """At most :data:`PER_KEY` pool calls at once per key: one key's calls queue behind each
    other, so another key always finds a worker that is not the first key's."""

    def __init__(self) -> None:
        self._gates: dict[str, asyncio.Semaphore] = {}
        self._users: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str | None) -> AsyncIterator[None]:
        if key is None:
            yield
            return
        gate = self._gates.setdefault(key, asyncio.Semaphore(PER_KEY))
        self._users[key] = self._users.get(key, 0) + 1
        try:
            async with gate:
                yield
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key], self._gates[key]


_per_key = _PerKey()


async def in_cpu_process(fn: Callable[..., T], /, *args: Any, key: str | None = None) -> T:
    """``fn(*args)`` in a worker process (its exceptions raised here), at most :data:`PER_KEY`
    at once for ``key`` (the caller's rate-limit key). A pool whose worker died (killed, out of
    memory) is replaced once."""
    async with _per_key.hold(key):
        return await _in_process(fn, args)


async def _in_process(fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    loop = asyncio.get_running_loop()
    for attempt in (1, 2):
        pool = _process_pool()
        try:
            result = await loop.run_in_executor(pool, _run, fn, args)
            break
        except BrokenProcessPool:
            _forget_broken(pool)
            if attempt == 2:
                raise
    if isinstance(result, _Refused):
        raise AdmissionError(result.reason_code, result.detail, result.field)
    return result  # type: ignore[no-any-return]


async def in_cpu_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on the bounded thread pool: for smaller work on this process's own
    objects (with this task's context variables, as :func:`asyncio.to_thread` does)."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await loop.run_in_executor(_thread_pool(), call)


def shareable_ledger(url: str) -> bool:
    """Whether a worker process can open this ledger (an in-memory SQLite lives in one process)."""
    return not is_sqlite_memory(url)


_ledgers: OrderedDict[str, LedgerStore] = OrderedDict()


def worker_ledger(url: str) -> LedgerStore:
    """In a worker: the ledger at ``url``, opened once and kept (the least recently used of more
    than :data:`WORKER_LEDGERS` is closed)."""
    with _lock:
        store = _ledgers.pop(url, None) or LedgerStore(url)
        _ledgers[url] = store
        while len(_ledgers) > WORKER_LEDGERS:
            _, old = _ledgers.popitem(last=False)
            old.close()
        return store
