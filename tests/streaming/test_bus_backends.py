"""Backend specifics: cross-process streaming, write batching, expiry clean-up, URLs."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import uuid
from pathlib import Path

import pytest

from tests.streaming.conftest import (
    REDIS_URL,
    cid,
    collect,
    drop_redis_keys,
    redis_problem,
    skip_without_redis,
    texts,
)
from turngate.streaming import NullBus, TokenBusUrlError, open_token_bus
from turngate.streaming.memory_bus import MemoryTokenBus
from turngate.streaming.redis_bus import RedisTokenBus
from turngate.streaming.sqlite_bus import SqliteTokenBus

ROOT = Path(__file__).resolve().parents[2]


async def run_publisher(url: str, correlation_id: str, n: int, delay_ms: float, attempts: int = 1) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.streaming.publisher_proc",
        url,
        correlation_id,
        str(n),
        str(delay_ms),
        str(attempts),
        cwd=ROOT,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()


@pytest.fixture(params=["sqlite", "redis"])
async def shared_url(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "sqlite":
        yield f"sqlite:///{(tmp_path / 'stream.sqlite3').as_posix()}"
        return
    skip_without_redis(await redis_problem())
    prefix = f"turngate-test:{uuid.uuid4().hex[:10]}:"
    yield f"{REDIS_URL}?key_prefix={prefix}"
    await drop_redis_keys(prefix)


async def test_publisher_in_another_process(shared_url: str) -> None:
    bus = open_token_bus(shared_url)
    try:
        c = cid()
        listener = asyncio.create_task(collect(bus, c, timeout=30))
        await asyncio.sleep(0.05)
        await run_publisher(shared_url, c, 100, 1)
        assert texts(await listener) == [f"t{i} " for i in range(100)]
        # A subscriber that comes after the publisher process is gone still gets everything.
        assert texts(await collect(bus, c)) == [f"t{i} " for i in range(100)]
    finally:
        await bus.aclose()


async def test_retry_in_another_process_resets_the_subscriber(shared_url: str) -> None:
    bus = open_token_bus(shared_url)
    try:
        c = cid()
        listener = asyncio.create_task(collect(bus, c, timeout=30))
        await asyncio.sleep(0.05)
        await run_publisher(shared_url, c, 5, 1, attempts=2)
        kinds = [(e.kind, e.attempt) for e in await listener]
        assert kinds == [("token", 1)] * 5 + [("error", 1), ("reset", 2)] + [("token", 2)] * 5 + [
            ("finish", 2)
        ]
    finally:
        await bus.aclose()


async def test_sqlite_batches_writes(tmp_path: Path) -> None:
    bus = SqliteTokenBus(tmp_path / "stream.sqlite3", flush_interval_s=0.005)
    batches: list[int] = []
    write = bus._write_batch_sync

    def counting(batch: list) -> None:
        batches.append(len(batch))
        write(batch)

    bus._write_batch_sync = counting  # type: ignore[method-assign]
    try:
        c = cid()
        await bus.start(c, 1)
        for seq in range(200):
            await bus.publish(c, 1, seq, f"t{seq}")
            await asyncio.sleep(0.0005)
        await bus.finish(c, 1)
        assert sum(batches) == 202
        assert len(batches) < 60, batches  # ~ one transaction per 5 ms, not one per token
        assert texts(await bus.read(c)) == [f"t{i}" for i in range(200)]
    finally:
        await bus.aclose()


async def test_sqlite_is_its_own_wal_file_with_relaxed_sync(tmp_path: Path) -> None:
    path = tmp_path / "stream.sqlite3"
    bus = open_token_bus(f"sqlite:///{path.as_posix()}")
    try:
        assert isinstance(bus, SqliteTokenBus) and bus.path == path
        await bus.start("c", 1)
        await bus.finish("c", 1)
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"stream_entries", "streams"} <= tables and "events" not in tables
    finally:
        await bus.aclose()


async def test_sqlite_purges_expired_streams(tmp_path: Path) -> None:
    path = tmp_path / "stream.sqlite3"
    bus = SqliteTokenBus(path, ttl_s=0.2)
    try:
        await bus.start("old", 1)
        await bus.publish("old", 1, 0, "x")
        await bus.finish("old", 1)
        await asyncio.sleep(0.3)
        await bus.start("new", 1)
        await bus.finish("new", 1)
        assert await bus.purge_expired() == 3
        with sqlite3.connect(path) as conn:
            left = {row[0] for row in conn.execute("SELECT DISTINCT correlation_id FROM stream_entries")}
        assert left == {"new"}
    finally:
        await bus.aclose()


async def test_sqlite_collects_garbage_while_publishing(tmp_path: Path) -> None:
    path = tmp_path / "stream.sqlite3"
    bus = SqliteTokenBus(path, ttl_s=0.1, gc_interval_s=0.0)
    try:
        await bus.start("old", 1)
        await bus.finish("old", 1)
        await asyncio.sleep(0.2)
        await bus.start("new", 1)
        await bus.finish("new", 1)
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT count(*) FROM streams WHERE correlation_id='old'").fetchone()[0] == 0
    finally:
        await bus.aclose()


async def test_redis_stream_has_a_ttl_and_a_cap() -> None:
    skip_without_redis(await redis_problem())
    prefix = f"turngate-test:{uuid.uuid4().hex[:10]}:"
    bus = RedisTokenBus(REDIS_URL, key_prefix=prefix, ttl_s=60, maxlen=50)
    try:
        c = cid()
        await bus.start(c, 1)
        for seq in range(500):
            await bus.publish(c, 1, seq, "x")
        await bus.finish(c, 1)
        ttl_ms = await bus._redis.pttl(bus.key(c))
        assert 0 < ttl_ms <= 60_000
        assert await bus._redis.xlen(bus.key(c)) < 500  # approximate trimming (MAXLEN ~)
    finally:
        await bus.aclose()
        await drop_redis_keys(prefix)


async def test_a_failing_write_is_reported_by_finish_not_by_publish(tmp_path: Path) -> None:
    bus = SqliteTokenBus(tmp_path / "stream.sqlite3")

    def broken(batch: list) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    bus._write_batch_sync = broken  # type: ignore[method-assign]
    try:
        await bus.start("c", 1)
        await bus.publish("c", 1, 0, "x")  # never raises: the write happens later
        with pytest.raises(sqlite3.OperationalError):
            await bus.finish("c", 1)
    finally:
        await bus.aclose()


def test_urls(tmp_path: Path) -> None:
    assert isinstance(open_token_bus("memory://"), MemoryTokenBus)
    sqlite_bus = open_token_bus(
        f"sqlite:///{tmp_path.as_posix()}/a/stream.sqlite3?ttl_s=5&flush_interval_ms=2"
    )
    assert isinstance(sqlite_bus, SqliteTokenBus) and sqlite_bus.path == tmp_path / "a" / "stream.sqlite3"
    assert isinstance(open_token_bus("redis://127.0.0.1:6379/3?ttl_s=60&maxlen=10"), RedisTokenBus)
    for bad in ("kafka://x", "sqlite://", "sqlite:///:memory:", "memory://?nope=1", "memory://?ttl_s=abc"):
        with pytest.raises(TokenBusUrlError):
            open_token_bus(bad)


async def test_named_memory_buses_are_shared_in_the_process() -> None:
    worker, api, other = (
        open_token_bus("memory://dev"),
        open_token_bus("memory://dev"),
        open_token_bus("memory://"),
    )
    assert worker is api and other is not worker
    await worker.start("c", 1)
    await worker.publish("c", 1, 0, "hi")
    await worker.finish("c", 1)
    await worker.aclose()
    assert texts(await api.read("c")) == ["hi"]  # still open for the API
    await api.aclose()
    fresh = open_token_bus("memory://dev")
    assert fresh is not api and await fresh.read("c") == []
    await fresh.aclose()


def test_settings_default_is_an_absolute_sqlite_file(tmp_path: Path) -> None:
    from turngate.settings import load_settings

    url = load_settings(data_dir=tmp_path).effective_token_bus_url
    bus = open_token_bus(url)
    assert isinstance(bus, SqliteTokenBus) and bus.path == tmp_path / "stream.sqlite3"


async def test_null_bus_streams_nothing() -> None:
    bus = NullBus()
    await bus.start("c", 1)
    await bus.publish("c", 1, 0, "x")
    await bus.finish("c", 1)
    assert await bus.read("c") == []
    assert [e async for e in bus.subscribe("c")] == []
    assert bus.position("1") is None
