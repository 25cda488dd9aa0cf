"""One reader of the ledger for the whole API process, fanning new events out in memory.

The worker process writes the ledger; the API learns of new commits from the store's change
listener (PostgreSQL: LISTEN/NOTIFY; SQLite: a poll of PRAGMA data_version every few ms, only
while somebody waits). One background task reads each change once (`since(cursor)`), hands the
new events to the requests waiting for those turns and wakes /tail subscribers. Waiting costs
one query per change, not one per waiter per change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from turngate.core.events import Event
from turngate.ledger import LedgerStore, LedgerUnavailableError

if TYPE_CHECKING:
    from turngate.api.ledger_outage import LedgerOutage

log = logging.getLogger(__name__)
TurnKey = tuple[str, str, str]  # (stream_id, thread_id, turn_id)
READ_BATCH = 1000


def turn_key(event: Event) -> TurnKey:
    return (event.stream_id, event.thread_id, event.turn_id)


@dataclass
class _TurnWaiter:
    done: Callable[[dict[str, Event]], bool]
    events: dict[str, Event] = field(default_factory=dict)
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, event: Event) -> None:
        self.events.setdefault(str(event.kind), event)
        if self.done(self.events):
            self.ready.set()


class LedgerWatcher:
    def __init__(
        self, store: LedgerStore, *, poll_interval_s: float = 0.003, outage: LedgerOutage | None = None
    ) -> None:
        self._store = store
        self._outage = outage
        self._poll = poll_interval_s
        self._changed = asyncio.Condition()
        self._interest = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._cursor = -1
        self._turn_waiters: dict[TurnKey, list[_TurnWaiter]] = {}
        self.generation = 0  # bumps on every observed change

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ledger-watcher")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        # PostgreSQL pushes commits (LISTEN/NOTIFY); SQLite is polled cheaply (PRAGMA data_version),
        # and only while somebody waits.
        listener = self._store.change_listener(poll_interval_s=self._poll)
        try:
            self._cursor = (await asyncio.to_thread(self._store.head))[0] - 1
            pending = False
            while True:
                if self._interest == 0:
                    self._wake.clear()
                    await self._wake.wait()
                pending = await listener.wait(timeout_s=1.0) or pending
                if not pending:
                    continue
                try:
                    await self._dispatch_new_events()
                except LedgerUnavailableError as exc:  # an outage: reported once, read again
                    if self._outage is not None:
                        self._outage.failed(exc)
                    else:
                        log.warning("ledger read failed; retrying: %s", exc)
                    await asyncio.sleep(0.5)
                    continue
                except Exception:  # any other ledger error must not kill the watcher either
                    log.exception("ledger read failed; retrying")
                    await asyncio.sleep(0.5)
                    continue  # still pending: read again
                pending = False
                await self.notify()
        finally:
            await listener.aclose()

    async def _dispatch_new_events(self) -> None:
        while True:
            batch = await asyncio.to_thread(self._store.since, self._cursor, limit=READ_BATCH)
            for event in batch:
                self._cursor = event.index
                for waiter in self._turn_waiters.get(turn_key(event), ()):
                    waiter.add(event)
            if len(batch) < READ_BATCH:
                return

    async def notify(self) -> None:
        async with self._changed:
            self.generation += 1
            self._changed.notify_all()

    @contextlib.contextmanager
    def _interested(self) -> Iterator[None]:
        self._interest += 1
        self._wake.set()
        try:
            yield
        finally:
            self._interest -= 1

    async def wait_change(self, generation: int, timeout_s: float) -> int:
        """Wait until the generation moves past ``generation`` (or timeout); return the new one."""
        with self._interested():
            async with self._changed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._changed.wait_for(lambda: self.generation != generation), timeout_s
                    )
                return self.generation

    async def wait_turn(
        self,
        key: TurnKey,
        done: Callable[[dict[str, Event]], bool],
        timeout_s: float,
    ) -> tuple[dict[str, Event], bool]:
        """The turn's events by kind once ``done(events)`` holds, or what exists at the timeout.
        Returns (events, done)."""
        waiter = _TurnWaiter(done)
        self._turn_waiters.setdefault(key, []).append(waiter)
        try:
            with self._interested():
                # Registered first, then read: nothing appended in between can be missed.
                stream_id, thread_id, turn_id = key
                for event in await asyncio.to_thread(self._store.turn_events, thread_id, turn_id):
                    if event.stream_id == stream_id:
                        waiter.add(event)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.ready.wait(), timeout_s)
            return waiter.events, waiter.ready.is_set()
        finally:
            waiters = self._turn_waiters.get(key, [])
            waiters.remove(waiter)
            if not waiters:
                self._turn_waiters.pop(key, None)
