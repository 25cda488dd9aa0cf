"""Per-key limits shared across API replicas through Redis (TURNGATE_LIMITS_URL).

Two limiter instances with their own Redis clients stand for two API processes. The tests talk
to a real Redis at TURNGATE_TEST_REDIS_URL (default redis://127.0.0.1:6379/15) and are skipped,
with a loud reason, when nothing answers there; every test uses its own key prefix and deletes
its keys afterwards.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest
import redis

from tests.security.conftest import bearer, make_key
from tests.stack import api_server, make_settings
from turngate.devserver import DevServer, free_port
from turngate.security.limits import LimitsUrlError, open_limits
from turngate.security.ratelimit import RateLimiter
from turngate.security.redis_limits import (
    RedisOutage,
    RedisRateLimiter,
    RedisStreamSlots,
    open_redis_limits,
)
from turngate.security.streams import StreamSlots
from turngate.settings import load_settings

REDIS_URL = os.environ.get("TURNGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
LOGGER = "turngate.security.redis_limits"


def redis_problem() -> str | None:
    """None when Redis answers at REDIS_URL, else why not."""
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        client.ping()
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        client.close()


def with_prefix(url: str, prefix: str) -> str:
    parts = urlsplit(url)
    query = "&".join(filter(None, [parts.query, urlencode({"key_prefix": prefix})]))
    return parts._replace(query=query).geturl()


@dataclass
class SharedRedis:
    url: str  # REDIS_URL with this test's key_prefix
    prefix: str
    client: redis.Redis  # to look at the keys
    open: Callable[..., tuple[RedisRateLimiter, RedisStreamSlots]]  # one "API process"


@pytest.fixture
def shared() -> Iterator[SharedRedis]:
    problem = redis_problem()
    if problem is not None:
        pytest.skip(
            f"NO REDIS: limits shared across API replicas are NOT TESTED here ({REDIS_URL} did not "
            f"answer: {problem}). Start redis-server or set TURNGATE_TEST_REDIS_URL."
        )
    prefix = f"turngate-test:{uuid.uuid4().hex[:10]}:"
    url = with_prefix(REDIS_URL, prefix)
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    opened: list[tuple[RedisRateLimiter, RedisStreamSlots]] = []

    def open_process(
        rate_per_s: float = 2.0, burst: int = 4, streams_per_key: int = 2, lease_s: float = 30.0
    ) -> tuple[RedisRateLimiter, RedisStreamSlots]:
        limits = open_redis_limits(
            url, rate_per_s=rate_per_s, burst=burst, streams_per_key=streams_per_key, lease_s=lease_s
        )
        opened.append(limits)
        return limits

    try:
        yield SharedRedis(url, prefix, client, open_process)
    finally:
        for rate, streams in opened:
            streams.close()
            rate.close()
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
        client.close()


def test_two_processes_share_one_bucket_then_it_refills(shared: SharedRedis) -> None:
    (a, _), (b, _) = shared.open(rate_per_s=2.0, burst=4), shared.open(rate_per_s=2.0, burst=4)
    assert [a.acquire("k1"), b.acquire("k1"), a.acquire("k1"), b.acquire("k1")] == [0.0] * 4
    wait_a, wait_b = a.acquire("k1"), b.acquire("k1")
    assert 0.0 < wait_a <= 0.5 and 0.0 < wait_b <= 0.5  # one token in 0.5 s at 2/s, for both
    assert b.acquire("other") == 0.0  # per key
    time.sleep(max(wait_a, wait_b) + 0.05)
    assert b.acquire("k1") == 0.0
    assert a.acquire("k1") > 0.0
    # The bucket is named by the key id and holds only a count and a time: no secret in Redis.
    assert shared.client.hgetall(f"{shared.prefix}rate:k1").keys() == {"tokens", "ts"}


def test_concurrent_callers_never_take_more_than_the_limit(shared: SharedRedis) -> None:
    processes = [shared.open(rate_per_s=0.01, burst=20, streams_per_key=5) for _ in range(2)]

    def take(i: int) -> tuple[int, int]:
        rate, streams = processes[i % 2]
        tokens = sum(rate.acquire("hot") == 0.0 for _ in range(5))
        return tokens, int(streams.try_acquire("hot"))

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(take, range(16)))
    assert sum(tokens for tokens, _ in results) == 20  # 80 tries, burst 20, no refill to speak of
    assert sum(slots for _, slots in results) == 5  # 16 tries, 5 streams per key


def test_an_idle_bucket_expires_after_a_full_refill(shared: SharedRedis) -> None:
    rate, _ = shared.open(rate_per_s=20.0, burst=2)  # full again after 0.1 s
    assert rate.acquire("idle") == 0.0
    ttl_ms = shared.client.pttl(f"{shared.prefix}rate:idle")
    assert 0 < ttl_ms <= 100
    time.sleep(0.3)
    assert not shared.client.exists(f"{shared.prefix}rate:idle")
    assert [rate.acquire("idle"), rate.acquire("idle")] == [0.0, 0.0]  # gone = full


async def test_acquire_async_answers_on_the_event_loop(shared: SharedRedis) -> None:
    (a, _), (b, _) = shared.open(burst=2), shared.open(burst=2)
    assert [await a.acquire_async("k"), await b.acquire_async("k")] == [0.0, 0.0]
    assert await a.acquire_async("k") > 0.0
    assert await RateLimiter(1.0, 1).acquire_async("k") == 0.0  # the in-memory one as well


def test_stream_slots_are_shared_and_released(shared: SharedRedis) -> None:
    (_, a), (_, b) = shared.open(streams_per_key=2), shared.open(streams_per_key=2)
    assert a.try_acquire("k") and b.try_acquire("k")
    assert not a.try_acquire("k") and not b.try_acquire("k")  # 2 open in all
    assert a.try_acquire("other")
    assert (a.open_count("k"), b.open_count("k")) == (1, 1)  # each process counts its own
    a.release("k")
    assert b.try_acquire("k")
    assert b.open_count("k") == 2
    b.release("k")
    b.release("k")
    a.release("other")
    assert not shared.client.exists(f"{shared.prefix}streams:k", f"{shared.prefix}streams:other")


async def test_async_acquire_and_release_nowait_share_the_slots(shared: SharedRedis) -> None:
    """What the API's handlers call: the Redis round trips run off the event loop."""
    (_, a), (_, b) = shared.open(streams_per_key=2), shared.open(streams_per_key=2)
    assert await a.try_acquire_async("k") and await a.try_acquire_async("k")
    assert not await a.try_acquire_async("k")  # full in this process: no Redis call needed
    assert not await b.try_acquire_async("k")  # full across both
    a.release_nowait("k")
    assert a.open_count("k") == 1  # this process's count drops at once
    deadline = time.monotonic() + 2.0
    while not await b.try_acquire_async("k"):  # the shared lease goes a moment later
        assert time.monotonic() < deadline, "release_nowait never removed the lease"
        await asyncio.sleep(0.01)
    assert await StreamSlots(1).try_acquire_async("k")  # the in-memory one as well


@pytest.fixture
async def hanging_redis() -> AsyncIterator[str]:
    """A Redis URL whose server accepts connections and never answers."""

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client goes away
        writer.close()

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.close()


async def test_a_hanging_redis_does_not_stall_the_event_loop(hanging_redis: str) -> None:
    rate, streams = open_redis_limits(hanging_redis, rate_per_s=1.0, burst=2, streams_per_key=1)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    try:
        started = time.monotonic()
        assert await streams.try_acquire_async("k")  # the socket timeout, then the local count
        waited = time.monotonic() - started
        assert waited >= 0.2  # it did wait for Redis...
        assert ticks >= 5  # ...without holding up the loop meanwhile
    finally:
        ticking.cancel()
        await asyncio.to_thread(streams.close)
        rate.close()


async def test_a_cancelled_acquire_gives_its_slot_back(hanging_redis: str) -> None:
    rate, streams = open_redis_limits(hanging_redis, rate_per_s=1.0, burst=2, streams_per_key=1)
    try:
        attempt = asyncio.create_task(streams.try_acquire_async("k"))
        await asyncio.sleep(0.05)  # waiting for Redis now
        attempt.cancel()
        with pytest.raises(asyncio.CancelledError):
            await attempt
        deadline = time.monotonic() + 2.0
        # the thread ends after the socket timeout with a (local) slot, which goes back
        while streams.open_count("k") or not await streams.try_acquire_async("k"):
            assert time.monotonic() < deadline, "the cancelled caller's slot was never given back"
            await asyncio.sleep(0.02)
    finally:
        await asyncio.to_thread(streams.close)
        rate.close()


def test_a_crashed_process_s_slots_come_back_after_the_lease(shared: SharedRedis) -> None:
    (_, crashing), (_, survivor) = shared.open(lease_s=1.0), shared.open(lease_s=1.0)
    assert crashing.try_acquire("k") and crashing.try_acquire("k")
    time.sleep(1.5)  # longer than the lease: the heartbeat keeps the slots
    assert not survivor.try_acquire("k")
    crashing.close()  # the process dies: no release, no more heartbeats
    assert not survivor.try_acquire("k")
    deadline = time.monotonic() + 5.0
    while not survivor.try_acquire("k"):
        assert time.monotonic() < deadline, "a dead process's stream slots never came back"
        time.sleep(0.1)
    assert survivor.try_acquire("k") and not survivor.try_acquire("k")


def test_redis_down_falls_back_to_this_process_s_counts(caplog: pytest.LogCaptureFixture) -> None:
    down = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    rate, streams = open_redis_limits(down, rate_per_s=1.0, burst=2, streams_per_key=1)
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            waits = [rate.acquire("k") for _ in range(3)]
            assert waits[:2] == [0.0, 0.0] and waits[2] > 0.0  # fail open to the in-memory bucket
            assert streams.try_acquire("k") and not streams.try_acquire("k")  # the local count
            streams.release("k")
            assert streams.try_acquire("k")
            # one refused connection, then Redis is not asked again for a while: no request
            # after the first pays for a connection attempt
            assert rate._outage.skipping and streams._outage is rate._outage
        warnings = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "fall back to this API process's own counts" in warnings[0].getMessage()
    finally:
        streams.close()
        rate.close()


def test_the_outage_state_warns_once_per_30_s_and_retries_after_5_s(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    outage = RedisOutage(clock=lambda: now[0])
    assert not outage.skipping
    with caplog.at_level(logging.INFO, logger=LOGGER):
        outage.failed(ConnectionError("refused"))
        assert outage.skipping
        now[0] += 5.0
        assert not outage.skipping  # asked again after 5 s
        outage.failed(ConnectionError("refused"))  # within 30 s of the warning: silent
        now[0] += 30.0
        outage.failed(ConnectionError("refused"))
        outage.answered()
        outage.answered()
    levels = [r.levelname for r in caplog.records if r.name == LOGGER]
    assert levels == ["WARNING", "WARNING", "INFO"]


def test_shared_again_when_redis_answers_again(shared: SharedRedis) -> None:
    now = [0.0]
    outage = RedisOutage(clock=lambda: now[0])
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    rate = RedisRateLimiter(client, 1.0, 1, key_prefix=shared.prefix, outage=outage)
    other, _ = shared.open(rate_per_s=1.0, burst=1)
    try:
        outage.failed(ConnectionError("a blip"))
        assert rate.acquire("k") == 0.0  # from the local bucket: Redis untouched
        assert not shared.client.exists(f"{shared.prefix}rate:k")
        now[0] += 5.0
        assert rate.acquire("k") == 0.0  # from Redis again
        assert other.acquire("k") > 0.0  # ... shared with the other process
    finally:
        rate.close()


def test_open_limits_chooses_by_the_url(tmp_path: Path) -> None:
    local = open_limits(load_settings(data_dir=tmp_path))
    assert local.scope == "process"
    assert type(local.rate) is RateLimiter and type(local.streams) is StreamSlots
    shared = open_limits(
        load_settings(data_dir=tmp_path, limits_url="rediss://:pw@cache:6380/2", max_streams_per_key=3)
    )
    try:
        assert shared.scope == "redis"
        assert isinstance(shared.rate, RedisRateLimiter) and isinstance(shared.streams, RedisStreamSlots)
        assert shared.streams.per_key == 3
    finally:
        shared.close()  # nothing was connected: opening does not talk to Redis
    with pytest.raises(LimitsUrlError, match="'memcached' is not supported") as bad:
        open_limits(load_settings(data_dir=tmp_path, limits_url="memcached://:hunter2@cache:11211"))
    assert "hunter2" not in str(bad.value)
    with pytest.raises(LimitsUrlError, match="unknown option 'ttl'"):
        open_limits(load_settings(data_dir=tmp_path, limits_url="redis://cache:6379/0?ttl=5"))


async def test_two_api_replicas_share_the_limits_over_http(
    shared: SharedRedis, tmp_path: Path, temporal_server: DevServer
) -> None:
    """Two gateways (one ledger, one Redis): a key's burst and its streams count across both."""
    options: dict[str, object] = {
        "auth_mode": "keys",
        "rate_limit_per_s": 1.0,
        "rate_limit_burst": 3,
        "max_streams_per_key": 1,
        "limits_url": shared.url,
    }
    first = make_settings(tmp_path, temporal_server.address, **options)
    second = make_settings(tmp_path, temporal_server.address, **options)  # same ledger, own port
    rated, streaming, reader = (make_key(first, "acme", "snapshot.read") for _ in range(3))
    async with api_server(first) as a, api_server(second) as b:
        for http in (a, b):
            capabilities = (await http.get("/capabilities", headers=bearer(reader))).json()
            assert capabilities["limits"]["limits_scope"] == "redis"

        codes = [(await http.get("/snapshot", headers=bearer(rated))).status_code for http in (a, b, a)]
        assert codes == [200, 200, 200]
        limited = await b.get("/snapshot", headers=bearer(rated))
        assert limited.status_code == 429 and limited.json()["reason_code"] == "rate.limited"
        await asyncio.sleep(int(limited.headers["retry-after"]))
        assert (await a.get("/snapshot", headers=bearer(rated))).status_code == 200

        async with a.stream("GET", "/tail", headers=bearer(streaming)) as tail:
            assert tail.status_code == 200
            refused = await b.get("/tail", headers=bearer(streaming))
            assert refused.status_code == 429
            assert refused.json()["reason_code"] == "rate.too_many_streams"
        for _ in range(50):  # the slot comes back once replica a sees the client gone
            async with b.stream("GET", "/tail", headers=bearer(streaming)) as again:
                if again.status_code == 200:
                    break
            await asyncio.sleep(0.1)
        assert again.status_code == 200
