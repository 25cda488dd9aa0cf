"""The token bus: a side channel carrying a provider call's text deltas to live subscribers.

It is never the record. The provider activity still returns the full text, the EXECUTION event
in the ledger is what turngate proves things with, and bus entries expire (default 1 h).

Publisher side (the provider activity, in the worker process)::

    await bus.start(correlation_id, attempt)            # attempt > 1: earlier attempts are void
    await bus.publish(correlation_id, attempt, seq, text)
    await bus.finish(correlation_id, attempt, error=None)

Subscriber side (the API process, possibly on another machine)::

    async for event in bus.subscribe(correlation_id, after=last_seen_id):
        ...  # StreamEvent(id, kind=token|reset|finish|error, attempt, seq, text)

What a subscriber sees:

- Without ``after``: the current attempt from its beginning (a late subscriber gets the whole
  answer so far), then everything that follows.
- With ``after`` (an earlier event's ``id``): the events after it. If a newer attempt started
  since, the stale tokens are skipped and the subscriber gets a ``reset`` (its text so far is
  void) followed by the new attempt from its beginning.
- A new attempt starting while subscribed arrives as ``reset``; ``error`` (an attempt failed:
  ``text`` is the error type) does not end the subscription, since a retry may follow; ``finish``
  (the attempt succeeded) ends it.

Stored entries are ``start`` / ``token`` / ``finish`` / ``error``; a ``start`` reaches a
subscriber only as a ``reset`` and only when it voids something the subscriber may hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

log = logging.getLogger(__name__)

#: How long a stream stays readable after its last write.
DEFAULT_TTL_S = 3600.0

EventKindName = Literal["token", "reset", "finish", "error"]
EntryKind = Literal["start", "token", "finish", "error"]

#: An opaque position in one correlation's stream: a :attr:`StreamEvent.id` seen earlier (the SSE
#: ``Last-Event-ID``). ``TokenSubscriber.position`` says whether a raw string is one; subscribing
#: with a malformed position is the same as subscribing without one.
StreamPosition = str


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """What a subscriber receives. ``id`` grows monotonically within one correlation id."""

    id: str
    kind: EventKindName
    attempt: int
    seq: int
    text: str = ""


@dataclass(frozen=True, slots=True)
class Entry:
    """A stored bus entry (publisher side: ``id`` is assigned by the backend)."""

    correlation_id: str
    kind: EntryKind
    attempt: int
    seq: int = 0
    text: str = ""
    id: str = ""


@runtime_checkable
class TokenPublisher(Protocol):
    """The provider activity's side. Calls return quickly: writes may be batched."""

    async def start(self, correlation_id: str, attempt: int) -> None: ...

    async def publish(self, correlation_id: str, attempt: int, seq: int, text: str) -> None: ...

    async def finish(self, correlation_id: str, attempt: int, *, error: str | None = None) -> None:
        """The attempt ended (``error``: its error type). Everything before it is durable on return."""
        ...


@runtime_checkable
class TokenSubscriber(Protocol):
    """The API's side."""

    def subscribe(
        self, correlation_id: str, *, after: StreamPosition | None = None
    ) -> AsyncIterator[StreamEvent]: ...

    async def read(self, correlation_id: str, *, after: StreamPosition | None = None) -> list[StreamEvent]:
        """What :meth:`subscribe` would yield right now, without waiting for more."""
        ...

    def position(self, raw: str | None) -> StreamPosition | None:
        """``raw`` (an SSE ``Last-Event-ID``) as a position this bus can resume from, or None."""
        ...


@runtime_checkable
class TokenBus(TokenPublisher, TokenSubscriber, Protocol):
    async def aclose(self) -> None: ...


class NullBus:
    """Publishes nowhere; subscribers see nothing (streaming switched off)."""

    async def start(self, correlation_id: str, attempt: int) -> None:
        return None

    async def publish(self, correlation_id: str, attempt: int, seq: int, text: str) -> None:
        return None

    async def finish(self, correlation_id: str, attempt: int, *, error: str | None = None) -> None:
        return None

    async def subscribe(
        self, correlation_id: str, *, after: StreamPosition | None = None
    ) -> AsyncIterator[StreamEvent]:
        return
        yield  # pragma: no cover - makes this an async generator

    async def read(self, correlation_id: str, *, after: StreamPosition | None = None) -> list[StreamEvent]:
        return []

    def position(self, raw: str | None) -> StreamPosition | None:
        return None

    async def aclose(self) -> None:
        return None


# --------------------------------------------------------------------------- subscriber view


def current_attempt(entries: Sequence[Entry]) -> Sequence[Entry]:
    """``entries`` from the last ``start`` on (tokens of older attempts are void)."""
    for i in range(len(entries) - 1, -1, -1):
        if entries[i].kind == "start":
            return entries[i:]
    return entries


class SubscriberView:
    """Turns stored entries into what one subscriber sees (see the module doc)."""

    def __init__(self, *, resumed: bool) -> None:
        # A subscriber that resumes may hold tokens of an earlier attempt: a new start voids them.
        self._holds_something = resumed

    def translate(self, entry: Entry) -> StreamEvent | None:
        if entry.kind == "start":
            # Any later start voids what the subscriber holds, whatever its number: a local
            # provider call rerun after a lost worker starts again at attempt 1.
            if not self._holds_something:
                return None
            event = StreamEvent(entry.id, "reset", entry.attempt, 0, "")
        else:
            event = StreamEvent(entry.id, entry.kind, entry.attempt, entry.seq, entry.text)
        self._holds_something = True
        return event


class Feed(Protocol):
    async def next_batch(self, cursor: str | None) -> list[Entry]:
        """Entries after ``cursor`` (None: from the beginning); waits until there is at least one."""
        ...


class BusBase:
    """Shared subscriber logic over three backend primitives: ``_range``, ``_feed``, ``position``."""

    async def _range(self, correlation_id: str, after: str | None) -> list[Entry]:
        raise NotImplementedError

    def _feed(self, correlation_id: str) -> contextlib.AbstractAsyncContextManager[Feed]:
        raise NotImplementedError

    def position(self, raw: str | None) -> StreamPosition | None:
        """``raw`` as a position this bus can resume from (an SSE ``Last-Event-ID``), or None."""
        raise NotImplementedError

    async def read(self, correlation_id: str, *, after: StreamPosition | None = None) -> list[StreamEvent]:
        cursor = self.position(after)
        view = SubscriberView(resumed=cursor is not None)
        entries = current_attempt(await self._range(correlation_id, cursor))
        return [e for e in map(view.translate, entries) if e is not None]

    async def subscribe(
        self, correlation_id: str, *, after: StreamPosition | None = None
    ) -> AsyncIterator[StreamEvent]:
        cursor = self.position(after)
        view = SubscriberView(resumed=cursor is not None)
        # Registered first, then read: nothing written in between can be missed.
        async with self._feed(correlation_id) as feed:
            backlog = await self._range(correlation_id, cursor)
            if backlog:
                cursor = backlog[-1].id
            entries: Sequence[Entry] = current_attempt(backlog)
            while True:
                for entry in entries:
                    event = view.translate(entry)
                    if event is None:
                        continue
                    yield event
                    if event.kind == "finish":
                        return
                entries = await feed.next_batch(cursor)
                if entries:
                    cursor = entries[-1].id


# --------------------------------------------------------------------------- publisher batching


class Batcher:
    """Coalesces publisher writes: at most one flush per ``interval_s``, one write per flush.

    ``add`` never blocks the provider stream. The first entry after a quiet period is flushed at
    once (first-token latency); entries arriving while a flush is running or within the interval
    go into the next batch. ``flush`` writes everything pending now and re-raises a write error.
    """

    def __init__(self, write: Callable[[list[Entry]], Awaitable[None]], *, interval_s: float) -> None:
        self._write = write
        self._interval = interval_s
        self._pending: list[Entry] = []
        self._task: asyncio.Task[None] | None = None
        self._hurry = asyncio.Event()
        self._last_flush = 0.0
        self._error: BaseException | None = None

    def add(self, entry: Entry) -> None:
        self._pending.append(entry)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="token-bus-flush")

    async def flush(self) -> None:
        if self._pending and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._run(), name="token-bus-flush")
        self._hurry.set()
        if self._task is not None:
            await asyncio.shield(self._task)
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    async def _run(self) -> None:
        while self._pending:
            wait = self._last_flush + self._interval - time.monotonic()
            if wait > 0 and not self._hurry.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._hurry.wait(), wait)
            self._hurry.clear()
            batch, self._pending = self._pending, []
            self._last_flush = time.monotonic()
            try:
                await self._write(batch)
            except Exception as exc:  # the side channel must never break the provider call
                log.warning("token bus write failed (%d entries dropped): %s", len(batch), exc)
                self._error = exc

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.flush()
