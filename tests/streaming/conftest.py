"""Token bus fixtures: every contract test runs against memory, SQLite and Redis.

Redis tests talk to a real server at TURNGATE_TEST_REDIS_URL (default redis://127.0.0.1:6379/15)
and are skipped, with a loud reason, when nothing answers there.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from turngate.streaming.base import StreamEvent, TokenBus
from turngate.streaming.memory_bus import MemoryTokenBus
from turngate.streaming.redis_bus import RedisTokenBus
from turngate.streaming.sqlite_bus import SqliteTokenBus

REDIS_URL = os.environ.get("TURNGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
BACKENDS = ["memory", "sqlite", "redis"]

BusFactory = Callable[..., Awaitable[TokenBus]]


async def redis_problem() -> str | None:
    """None when Redis answers at REDIS_URL, else why not."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        await client.ping()
        version = (await client.info("server")).get("redis_version", "0")
        if tuple(int(p) for p in str(version).split(".")[:2]) < (6, 2):
            return f"Redis at {REDIS_URL} is {version}; the Redis token bus needs >= 6.2"
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        await client.aclose()


def skip_without_redis(problem: str | None) -> None:
    if problem is not None:
        pytest.skip(
            f"NO REDIS: the Redis token bus is NOT TESTED here ({REDIS_URL} did not answer: {problem}). "
            "Start redis-server or set TURNGATE_TEST_REDIS_URL."
        )


async def drop_redis_keys(prefix: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def make_bus(backend: str, tmp_path: Path) -> AsyncIterator[BusFactory]:
    """Open buses of this backend (several may share one store, as worker and API do)."""
    opened: list[TokenBus] = []
    prefix = f"turngate-test:{uuid.uuid4().hex[:10]}:"
    if backend == "redis":
        skip_without_redis(await redis_problem())

    async def factory(**options: float) -> TokenBus:
        bus: TokenBus
        if backend == "memory":
            if opened:  # one process: every "connection" is the same object
                return opened[0]
            bus = MemoryTokenBus(**options)
        elif backend == "sqlite":
            bus = SqliteTokenBus(tmp_path / "stream.sqlite3", **options)
        else:
            bus = RedisTokenBus(REDIS_URL, key_prefix=prefix, **options)
        opened.append(bus)
        return bus

    try:
        yield factory
    finally:
        for bus in opened:
            await bus.aclose()
        if backend == "redis":
            await drop_redis_keys(prefix)


@pytest.fixture
async def bus(make_bus: BusFactory) -> TokenBus:
    return await make_bus()


def cid() -> str:
    return f"c-{uuid.uuid4().hex[:12]}"


async def collect(
    bus: TokenBus,
    correlation_id: str,
    *,
    after: str | None = None,
    until: str = "finish",
    timeout: float = 5.0,
) -> list[StreamEvent]:
    """Subscribe and gather events up to and including the first of kind ``until``."""
    got: list[StreamEvent] = []

    async def run() -> None:
        async for event in bus.subscribe(correlation_id, after=after):
            got.append(event)
            if event.kind == until:
                return

    await asyncio.wait_for(run(), timeout)
    return got


def texts(events: list[StreamEvent]) -> list[str]:
    return [e.text for e in events if e.kind == "token"]
