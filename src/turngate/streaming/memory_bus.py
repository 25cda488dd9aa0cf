"""An in-process token bus (tests, single-process demos).

``memory://`` opens a fresh, private bus; ``memory://<name>`` the process-wide bus of that name
(API and worker in one process share it; it is cleared when the last opener closes it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

from turngate.streaming.base import DEFAULT_TTL_S, BusBase, Entry, StreamPosition


@dataclass
class _Stream:
    entries: list[Entry] = field(default_factory=list)
    expires_at: float = 0.0


class MemoryTokenBus(BusBase):
    def __init__(self, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        self._ttl = ttl_s
        self._streams: dict[str, _Stream] = {}
        self._next_id = 1
        self._changed = asyncio.Condition()

    # ----------------------------------------------------------------- publisher

    async def start(self, correlation_id: str, attempt: int) -> None:
        await self._append(Entry(correlation_id, "start", attempt))

    async def publish(self, correlation_id: str, attempt: int, seq: int, text: str) -> None:
        await self._append(Entry(correlation_id, "token", attempt, seq, text))

    async def finish(self, correlation_id: str, attempt: int, *, error: str | None = None) -> None:
        if error is None:
            await self._append(Entry(correlation_id, "finish", attempt))
        else:
            await self._append(Entry(correlation_id, "error", attempt, 0, error))

    async def _append(self, entry: Entry) -> None:
        stream = self._live(entry.correlation_id) or self._streams.setdefault(entry.correlation_id, _Stream())
        if stream.entries and self._expired(stream):
            stream.entries.clear()
        stream.entries.append(replace(entry, id=str(self._next_id)))
        stream.expires_at = time.time() + self._ttl
        self._next_id += 1
        async with self._changed:
            self._changed.notify_all()

    # ----------------------------------------------------------------- subscriber primitives

    def position(self, raw: str | None) -> StreamPosition | None:
        if raw is None or not raw.strip().isdigit():
            return None
        return str(int(raw))

    def _expired(self, stream: _Stream) -> bool:
        return stream.expires_at <= time.time()

    def _live(self, correlation_id: str) -> _Stream | None:
        stream = self._streams.get(correlation_id)
        if stream is None or self._expired(stream):
            return None
        return stream

    async def _range(self, correlation_id: str, after: str | None) -> list[Entry]:
        stream = self._live(correlation_id)
        if stream is None:
            return []
        floor = int(after) if after is not None else 0
        return [e for e in stream.entries if int(e.id) > floor]

    @contextlib.asynccontextmanager
    async def _feed(self, correlation_id: str) -> AsyncIterator[_MemoryFeed]:
        yield _MemoryFeed(self, correlation_id)

    async def purge_expired(self) -> int:
        gone = [cid for cid, stream in self._streams.items() if self._expired(stream)]
        removed = sum(len(self._streams.pop(cid).entries) for cid in gone)
        return removed

    async def aclose(self) -> None:
        self._streams.clear()


class _SharedMemoryTokenBus(MemoryTokenBus):
    def __init__(self, name: str, *, ttl_s: float) -> None:
        super().__init__(ttl_s=ttl_s)
        self.name = name
        self.openers = 0

    async def aclose(self) -> None:
        self.openers -= 1
        if self.openers <= 0:
            _SHARED.pop(self.name, None)
            await super().aclose()


_SHARED: dict[str, _SharedMemoryTokenBus] = {}


def shared_memory_bus(name: str, *, ttl_s: float = DEFAULT_TTL_S) -> MemoryTokenBus:
    """The process-wide bus called ``name`` (created on first use; one ``aclose`` per open)."""
    bus = _SHARED.get(name)
    if bus is None:
        bus = _SHARED[name] = _SharedMemoryTokenBus(name, ttl_s=ttl_s)
    bus.openers += 1
    return bus


class _MemoryFeed:
    def __init__(self, bus: MemoryTokenBus, correlation_id: str) -> None:
        self._bus = bus
        self._cid = correlation_id

    async def next_batch(self, cursor: str | None) -> list[Entry]:
        async with self._bus._changed:
            while True:
                batch = await self._bus._range(self._cid, cursor)
                if batch:
                    return batch
                await self._bus._changed.wait()
