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
from collections.abc import Awaitable, Callable

from turngate.core.events import Event

log = logging.getLogger(__name__)

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
