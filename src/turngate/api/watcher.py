"""One reader of the ledger for the whole API process, fanning new events out in memory.

The worker process writes the ledger; the API learns of new commits from the store's change
listener (PostgreSQL: LISTEN/NOTIFY; SQLite: a poll of PRAGMA data_version every few ms, only
while somebody waits). One background task reads each change once (`since(cursor)`), hands the
new events to the requests waiting for those turns and wakes /tail subscribers. Waiting costs
one query per change, not one per waiter per change. The last events read stay in memory, so a
/tail subscriber near the head reads them from there rather than querying the ledger again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from turngate.core.events import Event, EventKind
from turngate.ledger import LedgerStore, LedgerUnavailableError
from turngate.ledger.thread_claims import blocks_intent

if TYPE_CHECKING:
    from turngate.api.ledger_outage import LedgerOutage

log = logging.getLogger(__name__)
#: A turn's identity: (tenant_id, stream_id, thread_id, turn_id). The tenant is part of it, so
#: a wait never sees another tenant's events, whatever ids that tenant chose.
TurnKey = tuple[str | None, str, str, str]
READ_BATCH = 1000
#: Events kept in memory after they were dispatched (/tail subscribers within this many events
#: of the head read from memory; one further behind reads the ledger).
RECENT_EVENTS = 256


def turn_key(event: Event) -> TurnKey:
    return (event.tenant_id, event.stream_id, event.thread_id, event.turn_id)


@dataclass(frozen=True)
class TurnWait:
    """What a wait found: the turn's events by kind, whether ``done`` held, and whether the
    turn's INTENT was refused for good (another tenant's events were recorded first in its
    thread, or another turn under its correlation id: ``ledger/thread_claims.py``)."""

    events: dict[str, Event]
    done: bool
    refused: bool = False
    #: the watcher's read position when the wait ended: every event of the turn up to this
    #: index is in ``events`` (a later wait for the turn goes on from here: ``after=``)
    read_up_to: int | None = None


@dataclass(eq=False)
class _TurnWaiter:
    key: TurnKey
    done: Callable[[dict[str, Event]], bool]
    correlation_id: str | None = None  # set: also watch for what refuses the turn's INTENT
    events: dict[str, Event] = field(default_factory=dict)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    blocked: bool = False  # something that refuses the INTENT was seen (confirmed before use)

    def add(self, event: Event) -> None:
        self.events.setdefault(str(event.kind), event)
        if self.done(self.events):
            self.ready.set()

    def offer(self, event: Event) -> None:
        """Any event of the turn's thread or correlation id."""
        if turn_key(event) == self.key:
            self.add(event)
        elif str(EventKind.INTENT) not in self.events and self._blocks(event):
            self.blocked = True
            self.ready.set()

    def _blocks(self, event: Event) -> bool:
        tenant_id, _, thread_id, turn_id = self.key
        return event.correlation_id == self.correlation_id or blocks_intent(
            tenant_id, thread_id, turn_id, event
        )


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
        self._cursor_known = False  # the ledger's head was read: _cursor is where reading stands
        # the last events dispatched, in index order, without gaps, the last one at _cursor
        self._recent: deque[Event] = deque(maxlen=RECENT_EVENTS)
        self._turn_waiters: dict[TurnKey, list[_TurnWaiter]] = {}
        # waiters that also watch for what refuses their INTENT, by thread and by correlation id
        self._claim_waiters: dict[str, list[_TurnWaiter]] = {}
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
            self._cursor_known = True
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
                self._recent.append(event)
                for waiter in self._turn_waiters.get(turn_key(event), ()):
                    waiter.add(event)
                if self._claim_waiters:
                    for waiter in self._claim_waiters_of(event):
                        waiter.offer(event)
            if len(batch) < READ_BATCH:
                return

    @property
    def read_up_to(self) -> int | None:
        """The index of the last event this watcher has read (-1: none yet); None until it has
        read where the ledger stands."""
        return self._cursor if self._cursor_known else None

    def recent_since(
        self, cursor: int, limit: int, matches: Callable[[Event], bool]
    ) -> tuple[list[Event], int] | None:
        """From memory: the events after index ``cursor`` that ``matches`` accepts (at most
        ``limit``, ascending) and the cursor to go on from. None when memory does not hold every
        event after ``cursor`` that this watcher has read (read the ledger instead). Events
        appended since the last change this watcher dispatched come with the next
        :meth:`wait_change`."""
        if not self._cursor_known:
            return None
        if cursor >= self._cursor:
            return [], cursor
        if not self._recent or self._recent[0].index > cursor + 1:
            return None
        newer = list(itertools.takewhile(lambda e: e.index > cursor, reversed(self._recent)))
        found: list[Event] = []
        for event in reversed(newer):
            if matches(event):
                found.append(event)
                if len(found) >= limit:
                    return found, event.index
        return found, self._cursor

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

    def _claim_waiters_of(self, event: Event) -> list[_TurnWaiter]:
        found = self._claim_waiters.get(event.thread_id, [])
        if event.correlation_id != event.thread_id:
            found = found + self._claim_waiters.get(event.correlation_id, [])
        return found

    async def wait_turn(
        self,
        key: TurnKey,
        done: Callable[[dict[str, Event]], bool],
        timeout_s: float,
        *,
        after: TurnWait | None = None,
    ) -> tuple[dict[str, Event], bool]:
        """The turn's events by kind once ``done(events)`` holds, or what exists at the timeout.
        Returns (events, done). ``after``: an earlier wait for this turn, which this one goes
        on from (what it found, then the events read since, from memory when memory still holds
        them) instead of reading the turn from the ledger again."""
        found = await self._wait(_TurnWaiter(key, done), timeout_s, after=after)
        return found.events, found.done

    async def wait_admitted(
        self,
        key: TurnKey,
        correlation_id: str,
        done: Callable[[dict[str, Event]], bool],
        timeout_s: float,
    ) -> TurnWait:
        """:meth:`wait_turn` for a turn just started, whose INTENT may still be refused: ends
        early, ``refused``, once the ledger shows it never will be recorded."""
        return await self._wait(_TurnWaiter(key, done, correlation_id), timeout_s)

    async def _wait(
        self, waiter: _TurnWaiter, timeout_s: float, *, after: TurnWait | None = None
    ) -> TurnWait:
        key, intent = waiter.key, str(EventKind.INTENT)
        # A waiter for a turn just started also hears of its thread and its correlation id.
        claims = list(dict.fromkeys([key[2], waiter.correlation_id])) if waiter.correlation_id else []
        self._turn_waiters.setdefault(key, []).append(waiter)
        for name in claims:
            self._claim_waiters.setdefault(name, []).append(waiter)
        try:
            with self._interested():
                # Registered first, then read: nothing appended in between can be missed.
                caught_up = self._since_earlier_wait(after, key) if after is not None else None
                if caught_up is not None:
                    events, blocked = caught_up, False
                else:
                    events, blocked = await asyncio.to_thread(self._read, waiter, check_claims=bool(claims))
                for event in events:
                    waiter.add(event)
                if blocked:
                    waiter.blocked = True
                    waiter.ready.set()
                loop = asyncio.get_running_loop()
                deadline = loop.time() + timeout_s
                while True:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(waiter.ready.wait(), max(0.0, deadline - loop.time()))
                    if not waiter.blocked or intent in waiter.events:
                        break
                    # What refuses the INTENT is recorded for good; read the turn once more (its
                    # INTENT may have been recorded before it): still absent, it never will be.
                    events, _ = await asyncio.to_thread(self._read, waiter, check_claims=False)
                    for event in events:
                        waiter.add(event)
                    if intent not in waiter.events:
                        return TurnWait(waiter.events, False, refused=True)
                    waiter.blocked = False
                    if not waiter.done(waiter.events):
                        waiter.ready.clear()
            return TurnWait(waiter.events, waiter.done(waiter.events), read_up_to=self.read_up_to)
        finally:
            _unregister(self._turn_waiters, key, waiter)
            for name in claims:
                _unregister(self._claim_waiters, name, waiter)

    def _since_earlier_wait(self, earlier: TurnWait, key: TurnKey) -> list[Event] | None:
        """What an earlier wait for the turn found, and the turn's events this watcher read
        after it (from memory); None when that cannot be known without reading the ledger."""
        if earlier.read_up_to is None:
            return None
        served = self.recent_since(earlier.read_up_to, RECENT_EVENTS, lambda event: turn_key(event) == key)
        return None if served is None else [*earlier.events.values(), *served[0]]

    def _read(self, waiter: _TurnWaiter, *, check_claims: bool) -> tuple[list[Event], bool]:
        """The turn's recorded events and (``check_claims``, its INTENT not among them) whether
        the ledger already holds what refuses that INTENT: one trip to a worker thread."""
        tenant_id, _, thread_id, turn_id = waiter.key
        events = [e for e in self._store.turn_events(thread_id, turn_id) if turn_key(e) == waiter.key]
        if not check_claims or any(e.kind == EventKind.INTENT for e in events):
            return events, False
        if self._store.intent_blocked(tenant_id, thread_id, turn_id):
            return events, True
        taken = self._store.by_correlation(str(waiter.correlation_id))
        return events, any(turn_key(e) != waiter.key for e in taken)


def _unregister(waiters: dict[Any, list[_TurnWaiter]], name: Any, waiter: _TurnWaiter) -> None:
    found = waiters.get(name, [])
    if waiter in found:
        found.remove(waiter)
    if not found:
        waiters.pop(name, None)
