"""Change listeners: how a reader learns that events were appended, from any process.

``LedgerStore.change_listener()`` returns one of these:

- PostgreSQL: :class:`PostgresChangeListener`, a dedicated psycopg connection that ``LISTEN``s on
  ``turngate_ledger``. Every INSERT into ``events`` notifies that channel with the highest index
  it inserted (a statement trigger, migration 0002; the store inserts one statement per event);
  PostgreSQL delivers notifications when, and only if, the transaction commits. Nothing is
  polled.
- SQLite: :class:`PollingChangeListener`, which polls ``LedgerStore.change_marker()`` (a few
  microseconds: ``PRAGMA data_version`` on an idle connection) every ``poll_interval_s``, and
  only while a caller is inside :meth:`ChangeListener.wait`, in a thread of its own that wakes
  the caller once something changed.

Contract (both): ``await wait(timeout_s)`` returns ``True`` when something may have been committed
since the previous ``wait`` returned ``True`` (changes are coalesced, and a ``True`` can be
spurious: re-read, e.g. ``since(cursor)``, to learn what changed), ``False`` when ``timeout_s``
passed without a change. The first call returns ``True`` as soon as the listener listens (at
once on SQLite; once ``LISTEN`` is active on PostgreSQL, a connection round trip), and so does
the first call after a lost connection has been re-established: the listener cannot know what
was committed while it was not listening, so the caller re-reads. Database outages are logged and never
raised from ``wait``; a listener is meant for one consumer task in one event loop (fan the
wake-ups out in memory). Close it with ``await listener.aclose()`` or ``async with``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any

from turngate.ledger.errors import LedgerError, LedgerUnavailableError

log = logging.getLogger(__name__)

#: The channel every INSERT into ``events`` notifies (payload: the highest index it inserted).
NOTIFY_CHANNEL = "turngate_ledger"
DEFAULT_POLL_INTERVAL_S = 0.003
#: Reconnect back-off of the PostgreSQL listener: first retry, then doubling up to the cap.
RECONNECT_FIRST_S = 0.05
RECONNECT_MAX_S = 2.0
#: libpq TCP keepalives, so a connection to a vanished server is noticed (~25 s) while idle.
LISTEN_KEEPALIVES: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


class ChangeListener(ABC):
    """Wakes a reader when events may have been appended (see the module documentation)."""

    @abstractmethod
    async def wait(self, timeout_s: float) -> bool:
        """True when something may have changed since the last True; False after ``timeout_s``."""

    @abstractmethod
    async def aclose(self) -> None:
        """Stop listening and release the connection. Idempotent."""

    async def __aenter__(self) -> ChangeListener:
        return self

    async def __aexit__(
        self,
        _exc_type: type[BaseException] | None,
        _exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class PollingChangeListener(ChangeListener):
    """Polls a change marker (``LedgerStore.change_marker``) while somebody waits."""

    def __init__(
        self, marker: Callable[[], int], *, poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    ) -> None:
        if poll_interval_s <= 0:
            raise ValueError("poll_interval_s must be positive")
        self._marker = marker
        self._poll = poll_interval_s
        self._last: int | None = None
        self._retry_delay: float | None = None  # set while the marker cannot be read
        self._closed = False
        # A thread of its own polls while a caller waits, and wakes the event loop once per
        # change rather than once per poll: a thread hop per poll cost ~10x the read itself.
        self._poller = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-poll")
        self._stop: threading.Event | None = None

    def _read_marker(self) -> int | None:
        """The current marker, or None while the database is unavailable (logged once)."""
        try:
            value = self._marker()
        except LedgerUnavailableError as exc:
            if self._retry_delay is None:
                log.warning("ledger change marker unavailable (will keep trying): %s", exc)
                self._retry_delay = RECONNECT_FIRST_S
            else:
                self._retry_delay = min(self._retry_delay * 2, RECONNECT_MAX_S)
            return None
        if self._retry_delay is not None:
            log.info("ledger change marker readable again")
            self._retry_delay = None
            self._last = None  # whatever happened meanwhile: report a change
        return value

    def _poll_until_change(self, deadline: float, stop: threading.Event) -> int | None:
        """In the poller thread: the marker once it differs from the last one reported; None at
        the deadline or once ``stop`` is set. The waiting coroutine records what it reports, so
        a poll whose wait was cancelled loses nothing."""
        while True:
            current = self._read_marker()
            if current is not None and current != self._last:
                return current
            remaining = deadline - time.monotonic()
            if remaining <= 0 or stop.is_set():
                return None
            stop.wait(min(self._retry_delay or self._poll, remaining))

    async def wait(self, timeout_s: float) -> bool:
        if self._closed:
            raise LedgerError("the change listener is closed")
        stop = self._stop = threading.Event()
        deadline = time.monotonic() + max(0.0, timeout_s)
        loop = asyncio.get_running_loop()
        try:
            changed = await loop.run_in_executor(self._poller, self._poll_until_change, deadline, stop)
        finally:
            stop.set()  # a cancelled wait's poll ends within one interval
        if changed is None:
            return False
        self._last = changed
        return True

    async def aclose(self) -> None:
        self._closed = True
        if self._stop is not None:
            self._stop.set()
        self._poller.shutdown(wait=False)


class PostgresChangeListener(ChangeListener):
    """``LISTEN turngate_ledger`` on a dedicated psycopg connection, drained by a background task.

    The task starts on the first :meth:`wait`, in that event loop. It consumes every notification
    as it arrives (so nothing piles up in PostgreSQL's notification queue however rarely the
    caller waits) and sets a flag that :meth:`wait` consumes. If the connection drops it logs,
    reconnects with back-off, and flags a change once ``LISTEN`` is active again.
    """

    def __init__(self, connect_kwargs: dict[str, Any], *, channel: str = NOTIFY_CHANNEL) -> None:
        self._connect_kwargs = {**LISTEN_KEEPALIVES, **connect_kwargs}
        self._channel = channel
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._backend_pid: int | None = None
        self._closed = False

    @property
    def backend_pid(self) -> int | None:
        """PID of the server process holding the ``LISTEN`` (None while not connected)."""
        return self._backend_pid

    def _ensure_started(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._listen_forever(), name=f"turngate-ledger-listen-{self._channel}"
            )

    async def wait(self, timeout_s: float) -> bool:
        if self._closed:
            raise LedgerError("the change listener is closed")
        self._ensure_started()
        if not self._changed.is_set():
            try:
                await asyncio.wait_for(self._changed.wait(), max(0.0, timeout_s))
            except TimeoutError:
                return False
        self._changed.clear()
        return True

    async def _listen_forever(self) -> None:
        import psycopg
        from psycopg import sql

        delay = RECONNECT_FIRST_S
        failing = False
        while True:
            conn: psycopg.AsyncConnection[Any] | None = None
            try:
                conn = await psycopg.AsyncConnection.connect(**self._connect_kwargs, autocommit=True)
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                self._backend_pid = conn.info.backend_pid
                if failing:
                    log.info("ledger change listener reconnected")
                failing, delay = False, RECONNECT_FIRST_S
                # Listening from here on: anything committed before is the caller's to re-read.
                self._changed.set()
                async for _notify in conn.notifies():
                    self._changed.set()
                raise psycopg.OperationalError("notification stream ended")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # psycopg.Error, OSError, ...: the listener must survive
                if not failing:
                    log.warning("ledger change listener lost its connection (reconnecting): %s", exc)
                failing = True
            finally:
                self._backend_pid = None
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_S)

    async def aclose(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
