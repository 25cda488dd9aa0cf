"""Concurrent SSE streams per key: a counter with a hard limit (full is full, no waiting).

:class:`StreamSlots` counts in this API process; with ``TURNGATE_LIMITS_URL``
:class:`turngate.security.redis_limits.RedisStreamSlots` counts across replicas.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator
from typing import TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse

#: Per-key stream limit of an app that did not configure one (a router in a bare test app).
DEFAULT_STREAMS_PER_KEY = 8

T = TypeVar("T")


class StreamSlots:
    def __init__(self, per_key: int) -> None:
        self.per_key = per_key
        self._open: dict[str, int] = {}

    def try_acquire(self, key: str) -> bool:
        if self._open.get(key, 0) >= self.per_key:
            return False
        self._open[key] = self._open.get(key, 0) + 1
        return True

    def release(self, key: str) -> None:
        left = self._open.get(key, 0) - 1
        if left > 0:
            self._open[key] = left
        else:
            self._open.pop(key, None)

    async def try_acquire_async(self, key: str) -> bool:
        """:meth:`try_acquire` for an event loop (here in memory: nothing to wait for)."""
        return self.try_acquire(key)

    def release_nowait(self, key: str) -> None:
        """:meth:`release` that never blocks (for ``finally`` blocks on an event loop, which a
        cancelled request must not await in). In memory it is :meth:`release`."""
        self.release(key)

    def open_count(self, key: str) -> int:
        return self._open.get(key, 0)

    def hold(self, key: str, messages: AsyncIterator[T]) -> AsyncIterator[T]:
        """Yield ``messages``; the slot (already acquired) is released exactly once when the
        stream ends, fails or the client goes away, or when the stream is dropped before it
        started (a client gone before the first byte: a generator that never ran has no
        ``finally`` to run, so a finalizer covers that case)."""
        released = False

        def release_once() -> None:
            nonlocal released
            if not released:
                released = True
                self.release_nowait(key)

        async def stream() -> AsyncIterator[T]:
            try:
                async for message in messages:
                    yield message
            finally:
                release_once()

        held = stream()
        weakref.finalize(held, release_once)
        return held


def too_many_streams(limit: int) -> JSONResponse:
    """429 ``rate.too_many_streams`` (the project's error shape) with ``Retry-After``."""
    body = {
        "ok": False,
        "reason_code": "rate.too_many_streams",
        "detail": f"{limit} streams are open for this key (TURNGATE_MAX_STREAMS_PER_KEY); close one first",
    }
    return JSONResponse(body, status_code=429, headers={"Retry-After": "1"})


def stream_slots(request: Request) -> StreamSlots:
    """The app's stream counter (``create_app`` sets it from the settings)."""
    slots: StreamSlots | None = getattr(request.app.state, "stream_slots", None)
    if slots is None:
        slots = request.app.state.stream_slots = StreamSlots(DEFAULT_STREAMS_PER_KEY)
    return slots
