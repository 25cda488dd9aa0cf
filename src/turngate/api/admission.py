"""Turn admission: at most ``TURNGATE_TURN_QUEUE_MAX`` turns in flight per API process.

A turn holds a slot from the moment it is admitted (before anything is recorded) until the
ledger shows it finished (an EXECUTION, or a DECISION that is not ALLOW) or a bound of the LLM
wall-clock limit plus a margin has passed. A request that finds no free slot is answered 503
``queue.full`` with ``Retry-After`` and nothing is recorded for it: overload sheds load at the
door instead of growing Temporal's backlog without bound.

The count is per API process (each replica admits up to the limit); ``/status`` shows it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from fastapi.responses import Response

from turngate.api.error_responses import error_response
from turngate.core.events import Event
from turngate.security.streams import StreamSlots, too_many_streams

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Added to the LLM wall-clock limit before a slot is released without a finished turn.
RELEASE_MARGIN_S = 30.0


def turn_finished(events: dict[str, Event]) -> bool:
    """The turn has nothing left to run: EXECUTION recorded, or not allowed to execute."""
    if "EXECUTION" in events:
        return True
    decision = events.get("DECISION")
    return decision is not None and decision.payload.get("decision") != "ALLOW"


class TurnSlots:
    """A counter of admitted, unfinished turns with a hard limit (no waiting: full is full)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self.refused = 0
        self._trackers: set[asyncio.Task[None]] = set()

    def try_acquire(self) -> bool:
        if self.in_flight >= self.limit:
            self.refused += 1
            return False
        self.in_flight += 1
        return True

    def release(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)

    def release_when(self, finished: Callable[[], Awaitable[object]]) -> None:
        """Release the slot once ``finished()`` returns (or fails): a background task."""

        async def track() -> None:
            try:
                await finished()
            except Exception as exc:  # a slot must never leak, whatever the watcher does
                log.warning("turn tracking failed, slot released: %s", exc)
            finally:
                self.release()

        task = asyncio.create_task(track())
        self._trackers.add(task)
        task.add_done_callback(self._trackers.discard)

    async def aclose(self) -> None:
        for task in list(self._trackers):
            task.cancel()
        await asyncio.gather(*self._trackers, return_exceptions=True)

    def status(self) -> dict[str, int]:
        return {"in_flight": self.in_flight, "max": self.limit, "refused_total": self.refused}


class TurnAdmission:
    """The turn slot (and, for ``?stream=true``, the stream slot) of one ingress request, held and
    given back by this one construct on every path::

        async with TurnAdmission(turns, streams, key, stream=True) as admission:
            if admission.refused is not None:
                return admission.refused
            ...
            admission.started(until_finished)   # the turn runs: its slot lives until it ends
            return EventSourceResponse(admission.stream(messages))

    On exit, whatever happened in between (a returned error, an exception such as a failing
    ledger read, the request task cancelled because its client left), a slot not handed over is
    released: the stream slot at once; the turn slot at once if the turn never started or is
    known finished, else by a tracker once the ledger shows the turn finished (bounded).
    """

    def __init__(self, turns: TurnSlots, streams: StreamSlots, limit_key: str, *, stream: bool) -> None:
        self._turns = turns
        self._streams = streams
        self._key = limit_key
        self._want_stream = stream
        self._turn_held = False
        self._stream_held = False
        self._finished: Callable[[], Awaitable[object]] | None = None
        self.refused: Response | None = None

    async def __aenter__(self) -> TurnAdmission:
        if self._want_stream:
            if not await self._streams.try_acquire_async(self._key):
                self.refused = too_many_streams(self._streams.per_key)
                return self
            self._stream_held = True
        if not self._turns.try_acquire():
            self.refused = error_response(
                503,
                "queue.full",
                f"{self._turns.limit} turns are in flight (TURNGATE_TURN_QUEUE_MAX); retry later",
            )
            self.refused.headers["Retry-After"] = "1"
            return self
        self._turn_held = True
        return self

    def started(self, finished: Callable[[], Awaitable[object]]) -> None:
        """The turn is running: its slot is given back once ``finished()`` returns (or fails)."""
        self._finished = finished

    def turn_finished(self) -> None:
        """The ledger shows the turn finished: its slot is given back now."""
        self._finished = None
        self._release_turn()

    def stream(self, messages: AsyncIterator[T]) -> AsyncIterator[T]:
        """Hand the stream slot to the response: released when the stream ends or is dropped."""
        self._stream_held = False
        return self._streams.hold(self._key, messages)

    async def __aexit__(self, *_: object) -> None:
        if self._stream_held:
            self._stream_held = False
            self._streams.release_nowait(self._key)
        if not self._turn_held:
            return
        if self._finished is not None:
            self._turn_held = False
            self._turns.release_when(self._finished)
        else:
            self._release_turn()

    def _release_turn(self) -> None:
        if self._turn_held:
            self._turn_held = False
            self._turns.release()
