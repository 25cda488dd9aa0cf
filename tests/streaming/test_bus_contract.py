"""The token bus contract, the same for every backend (memory, SQLite, Redis)."""

from __future__ import annotations

import asyncio

import pytest

from tests.streaming.conftest import BusFactory, cid, collect, texts
from turngate.streaming.base import TokenBus


async def publish_answer(
    bus: TokenBus, correlation_id: str, words: list[str], *, attempt: int = 1, delay_s: float = 0.0
) -> None:
    await bus.start(correlation_id, attempt)
    for seq, word in enumerate(words):
        await bus.publish(correlation_id, attempt, seq, word)
        if delay_s:
            await asyncio.sleep(delay_s)
    await bus.finish(correlation_id, attempt)


WORDS = [f"w{i} " for i in range(60)]


async def test_live_subscriber_gets_every_token_in_order(bus: TokenBus) -> None:
    c = cid()
    listener = asyncio.create_task(collect(bus, c))
    await asyncio.sleep(0.02)  # subscribed before anything is written
    await publish_answer(bus, c, WORDS, delay_s=0.001)
    events = await listener
    assert texts(events) == WORDS
    assert [e.seq for e in events if e.kind == "token"] == list(range(len(WORDS)))
    assert {e.attempt for e in events} == {1}
    assert events[-1].kind == "finish"
    assert [e.kind for e in events].count("reset") == 0


async def test_ids_grow_and_serve_as_positions(bus: TokenBus) -> None:
    c = cid()
    await publish_answer(bus, c, WORDS[:10])
    events = await bus.read(c)
    ids = [e.id for e in events]
    assert len(set(ids)) == len(ids)
    assert all(bus.position(i) == i for i in ids)
    keys = [tuple(int(p) for p in i.split("-")) for i in ids]
    assert keys == sorted(keys)


async def test_late_subscriber_gets_the_whole_answer(bus: TokenBus) -> None:
    c = cid()
    await publish_answer(bus, c, WORDS)
    events = await collect(bus, c)
    assert texts(events) == WORDS and events[-1].kind == "finish"
    assert [e.kind for e in await bus.read(c)] == [e.kind for e in events]


async def test_late_subscriber_mid_stream_gets_what_came_before(bus: TokenBus) -> None:
    c = cid()
    await bus.start(c, 1)
    for seq, word in enumerate(WORDS[:20]):
        await bus.publish(c, 1, seq, word)
    listener = asyncio.create_task(collect(bus, c))
    await asyncio.sleep(0.02)
    for seq, word in enumerate(WORDS[20:], start=20):
        await bus.publish(c, 1, seq, word)
    await bus.finish(c, 1)
    assert texts(await listener) == WORDS


async def test_resume_after_an_id(bus: TokenBus) -> None:
    c = cid()
    await publish_answer(bus, c, WORDS)
    first = await bus.read(c)
    tenth = [e for e in first if e.kind == "token"][9]
    rest = await collect(bus, c, after=tenth.id)
    assert texts(rest) == WORDS[10:]
    assert all(e.kind != "reset" for e in rest)
    assert texts(await bus.read(c, after=tenth.id)) == WORDS[10:]


async def test_resume_while_live(bus: TokenBus) -> None:
    c = cid()
    await bus.start(c, 1)
    for seq in range(5):
        await bus.publish(c, 1, seq, f"a{seq}")
    await bus.finish(c, 1, error="provider.rate_limited")  # flushes; a retry may follow
    seen = await bus.read(c)
    listener = asyncio.create_task(collect(bus, c, after=seen[2].id))
    await asyncio.sleep(0.02)
    await publish_answer(bus, c, ["b0", "b1"], attempt=2)
    events = await listener
    assert [(e.kind, e.text) for e in events] == [
        ("token", "a3"),
        ("token", "a4"),
        ("error", "provider.rate_limited"),
        ("reset", ""),
        ("token", "b0"),
        ("token", "b1"),
        ("finish", ""),
    ]


async def test_new_attempt_resets_live_subscribers(bus: TokenBus) -> None:
    c = cid()
    listener = asyncio.create_task(collect(bus, c))
    await asyncio.sleep(0.02)
    await bus.start(c, 1)
    await bus.publish(c, 1, 0, "stale ")
    await bus.publish(c, 1, 1, "answer")
    await bus.finish(c, 1, error="provider.server_error")
    await publish_answer(bus, c, ["fresh ", "answer"], attempt=2)
    events = await listener
    assert [(e.kind, e.attempt) for e in events] == [
        ("token", 1),
        ("token", 1),
        ("error", 1),
        ("reset", 2),
        ("token", 2),
        ("token", 2),
        ("finish", 2),
    ]
    assert events[2].text == "provider.server_error"


async def test_a_rerun_starting_again_at_attempt_one_resets_live_subscribers(bus: TokenBus) -> None:
    """A local provider call rerun after its worker was lost starts over at attempt 1."""
    c = cid()
    listener = asyncio.create_task(collect(bus, c))
    await asyncio.sleep(0.02)
    await bus.start(c, 1)
    await bus.publish(c, 1, 0, "lost ")  # the worker dies here: no finish
    await publish_answer(bus, c, ["fresh"], attempt=1)
    events = await listener
    assert [(e.kind, e.attempt, e.text) for e in events] == [
        ("token", 1, "lost "),
        ("reset", 1, ""),
        ("token", 1, "fresh"),
        ("finish", 1, ""),
    ]


async def test_late_subscriber_sees_only_the_current_attempt(bus: TokenBus) -> None:
    c = cid()
    await bus.start(c, 1)
    await bus.publish(c, 1, 0, "stale")
    await bus.finish(c, 1, error="provider.server_error")
    await publish_answer(bus, c, ["fresh"], attempt=2)
    events = await collect(bus, c)
    assert [(e.kind, e.attempt, e.text) for e in events] == [("token", 2, "fresh"), ("finish", 2, "")]


async def test_resume_from_a_voided_attempt_gets_a_reset_and_the_new_attempt(bus: TokenBus) -> None:
    c = cid()
    await bus.start(c, 1)
    for seq in range(3):
        await bus.publish(c, 1, seq, f"old{seq}")
    await bus.finish(c, 1, error="provider.server_error")
    old = await bus.read(c)
    await publish_answer(bus, c, ["new0", "new1"], attempt=2)
    events = await collect(bus, c, after=old[0].id)
    # The stale tail of attempt 1 is skipped: the reset voids it anyway.
    assert [(e.kind, e.text) for e in events] == [
        ("reset", ""),
        ("token", "new0"),
        ("token", "new1"),
        ("finish", ""),
    ]


async def test_error_does_not_end_the_subscription_finish_does(bus: TokenBus) -> None:
    c = cid()
    await bus.start(c, 1)
    await bus.finish(c, 1, error="provider.timeout")
    events = await collect(bus, c, until="error")
    assert [(e.kind, e.text) for e in events] == [("error", "provider.timeout")]
    follow = asyncio.create_task(collect(bus, c, after=events[-1].id))
    await asyncio.sleep(0.05)
    assert not follow.done()  # still waiting: a retry may come
    await publish_answer(bus, c, ["ok"], attempt=2)
    assert [e.kind for e in await follow] == ["reset", "token", "finish"]


async def test_streams_are_separate(bus: TokenBus) -> None:
    a, b = cid(), cid()
    listeners = [asyncio.create_task(collect(bus, x)) for x in (a, b)]
    await asyncio.sleep(0.02)
    await asyncio.gather(
        publish_answer(bus, a, ["a0", "a1", "a2"], delay_s=0.002),
        publish_answer(bus, b, ["b0", "b1"], delay_s=0.003),
    )
    got_a, got_b = await asyncio.gather(*listeners)
    assert texts(got_a) == ["a0", "a1", "a2"]
    assert texts(got_b) == ["b0", "b1"]


async def test_unknown_stream_reads_empty_and_waits(bus: TokenBus) -> None:
    c = cid()
    assert await bus.read(c) == []
    with pytest.raises(TimeoutError):
        await collect(bus, c, timeout=0.1)


async def test_malformed_positions_mean_from_the_start(bus: TokenBus) -> None:
    c = cid()
    await publish_answer(bus, c, ["x", "y"])
    for raw in (None, "", "garbage", "-1", "1.5"):
        assert bus.position(raw) is None
        assert texts(await bus.read(c, after=raw)) == ["x", "y"]


async def test_entries_expire(make_bus: BusFactory) -> None:
    bus = await make_bus(ttl_s=0.3)
    c = cid()
    await publish_answer(bus, c, ["soon ", "gone"])
    assert texts(await bus.read(c)) == ["soon ", "gone"]
    await asyncio.sleep(0.45)
    assert await bus.read(c) == []
    # Written again after expiry: a fresh stream, nothing of the old one comes back.
    await publish_answer(bus, c, ["again"], attempt=1)
    assert texts(await bus.read(c)) == ["again"]


async def test_a_second_connection_sees_the_same_stream(make_bus: BusFactory) -> None:
    writer, reader = await make_bus(), await make_bus()
    c = cid()
    listener = asyncio.create_task(collect(reader, c))
    await asyncio.sleep(0.02)
    await publish_answer(writer, c, WORDS, delay_s=0.001)
    assert texts(await listener) == WORDS
