"""The token bus at scale: one Redis Stream per correlation id (``redis://host:port/db``).

Writes: ``XADD ... MAXLEN ~ maxlen`` for each entry and ``PEXPIRE`` per touched stream, pipelined;
entries arriving while a pipeline is in flight go into the next one. Reads: ``XRANGE`` to catch
up, ``XREAD BLOCK`` to follow (one blocking connection per live subscriber). Entry ids are Redis
stream ids (``<ms>-<n>``), monotonic per stream, and serve as SSE ids. Needs Redis >= 6.2
(exclusive ``XRANGE`` bounds).

A stream expires ``ttl_s`` after its last write; ``maxlen`` caps one stream's length (a very long
answer loses its oldest entries first, and the SSE endpoint then falls back to the ledger).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any, cast

import redis.asyncio as aioredis

from turngate.streaming.base import DEFAULT_TTL_S, Batcher, BusBase, Entry, EntryKind, StreamPosition

DEFAULT_KEY_PREFIX = "turngate:tokens:"
DEFAULT_MAXLEN = 100_000
DEFAULT_BLOCK_MS = 1000
READ_PAGE = 1000
_STREAM_ID = re.compile(r"^\d+-\d+$")


class RedisTokenBus(BusBase):
    def __init__(
        self,
        url: str,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        maxlen: int = DEFAULT_MAXLEN,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        flush_interval_s: float = 0.0,
        block_ms: int = DEFAULT_BLOCK_MS,
    ) -> None:
        self._redis: aioredis.Redis = aioredis.Redis.from_url(url, decode_responses=True)
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._maxlen = maxlen
        self._prefix = key_prefix
        self._block_ms = block_ms
        self._batcher = Batcher(self._write_batch, interval_s=flush_interval_s)

    def key(self, correlation_id: str) -> str:
        return self._prefix + correlation_id

    async def ping(self) -> bool:
        return bool(await self._redis.ping())

    # ----------------------------------------------------------------- publisher

    async def start(self, correlation_id: str, attempt: int) -> None:
        self._batcher.add(Entry(correlation_id, "start", attempt))

    async def publish(self, correlation_id: str, attempt: int, seq: int, text: str) -> None:
        self._batcher.add(Entry(correlation_id, "token", attempt, seq, text))

    async def finish(self, correlation_id: str, attempt: int, *, error: str | None = None) -> None:
        if error is None:
            self._batcher.add(Entry(correlation_id, "finish", attempt))
        else:
            self._batcher.add(Entry(correlation_id, "error", attempt, 0, error))
        await self._batcher.flush()

    async def _write_batch(self, batch: list[Entry]) -> None:
        pipe = self._redis.pipeline(transaction=False)
        for e in batch:
            fields: dict[Any, Any] = {"k": e.kind, "a": e.attempt, "s": e.seq, "t": e.text}
            pipe.xadd(self.key(e.correlation_id), fields, maxlen=self._maxlen, approximate=True)
        for cid in dict.fromkeys(e.correlation_id for e in batch):
            pipe.pexpire(self.key(cid), self._ttl_ms)
        await pipe.execute()

    # ----------------------------------------------------------------- subscriber primitives

    def position(self, raw: str | None) -> StreamPosition | None:
        if raw is None or not _STREAM_ID.match(raw.strip()):
            return None
        return raw.strip()

    async def _range(self, correlation_id: str, after: str | None) -> list[Entry]:
        key = self.key(correlation_id)
        low = f"({after}" if after else "-"
        entries: list[Entry] = []
        while True:
            page = cast(list[_RawEntry], await self._redis.xrange(key, min=low, max="+", count=READ_PAGE))
            entries.extend(_entry(correlation_id, entry_id, fields) for entry_id, fields in page)
            if len(page) < READ_PAGE:
                return entries
            low = f"({page[-1][0]}"

    @contextlib.asynccontextmanager
    async def _feed(self, correlation_id: str) -> AsyncIterator[_RedisFeed]:
        yield _RedisFeed(self, correlation_id)

    async def aclose(self) -> None:
        await self._batcher.aclose()
        await self._redis.aclose()


class _RedisFeed:
    def __init__(self, bus: RedisTokenBus, correlation_id: str) -> None:
        self._bus = bus
        self._cid = correlation_id
        self._key = bus.key(correlation_id)

    async def next_batch(self, cursor: str | None) -> list[Entry]:
        while True:
            answer = cast(
                list[tuple[str, list[_RawEntry]]] | None,
                await self._bus._redis.xread(
                    {self._key: cursor or "0-0"}, count=READ_PAGE, block=self._bus._block_ms
                ),
            )
            for _key, page in answer or ():
                if page:
                    return [_entry(self._cid, entry_id, fields) for entry_id, fields in page]


#: One stream entry as the client returns it (decoded): its id and its fields.
_RawEntry = tuple[str, dict[str, str]]


def _entry(correlation_id: str, entry_id: str, fields: dict[str, str]) -> Entry:
    kind: EntryKind = fields["k"]  # type: ignore[assignment]
    return Entry(
        id=entry_id,
        correlation_id=correlation_id,
        kind=kind,
        attempt=int(fields["a"]),
        seq=int(fields["s"]),
        text=fields.get("t", ""),
    )
