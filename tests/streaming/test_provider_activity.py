"""The provider activity publishes to the token bus and still returns the full text."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.streaming.conftest import collect, texts
from turngate.activities import heartbeat
from turngate.activities.provider import ProviderActivities
from turngate.providers.base import ProviderError, ProviderRequest, StreamChunk, Usage
from turngate.streaming.memory_bus import MemoryTokenBus
from turngate.workflows.shared import ProviderCallInput

WORDS = ["Labas ", "rytas, ", "kaip ", "sekasi?"]


class FakeProvider:
    """Streams WORDS; optionally fails with ``fail`` after ``fail_after`` words."""

    name = "fake"
    models: tuple[str, ...] = ("fake-1",)

    def __init__(
        self, *, fail: ProviderError | Exception | None = None, fail_after: int = 0, word_s: float = 0.001
    ) -> None:
        self.fail = fail
        self.fail_after = fail_after
        self.word_s = word_s

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamChunk]:
        for i, word in enumerate(WORDS):
            if self.fail is not None and i == self.fail_after:
                raise self.fail
            await asyncio.sleep(self.word_s)
            yield StreamChunk(text=word)
        yield StreamChunk(usage=Usage(input_tokens=3, output_tokens=len(WORDS)))

    async def aclose(self) -> None:
        return None


def call(correlation_id: str = "c-1") -> ProviderCallInput:
    return ProviderCallInput(
        correlation_id=correlation_id,
        provider="fake",
        model="fake-1",
        messages=[{"role": "user", "content": "hi"}],
    )


def env(attempt: int = 1) -> ActivityEnvironment:
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(environment.info, attempt=attempt)
    return environment


async def test_publishes_each_delta_and_returns_the_full_text() -> None:
    bus = MemoryTokenBus()
    activities = ProviderActivities({"fake": FakeProvider()}, bus)
    listener = asyncio.create_task(collect(bus, "c-1"))
    await asyncio.sleep(0.01)
    beats: list[object] = []
    environment = env()
    environment.on_heartbeat = lambda *details: beats.append(details)
    result = await environment.run(activities.call_provider, call())
    assert result.output_text == "".join(WORDS)
    assert result.usage == {"input_tokens": 3, "output_tokens": 4}
    events = await listener
    assert texts(events) == WORDS
    assert [e.seq for e in events if e.kind == "token"] == [0, 1, 2, 3]
    assert events[-1].kind == "finish" and events[-1].attempt == 1
    assert not beats, "a call that answers before the first heartbeat is due sends none"


async def test_a_call_longer_than_the_first_heartbeat_delay_heartbeats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heartbeat, "FIRST_HEARTBEAT_S", 0.05)
    monkeypatch.setattr(heartbeat, "HEARTBEAT_EVERY_S", 0.05)
    activities = ProviderActivities({"fake": FakeProvider(word_s=0.06)}, MemoryTokenBus())
    beats: list[float] = []
    environment = env()
    started = asyncio.get_running_loop().time()
    environment.on_heartbeat = lambda *details: beats.append(asyncio.get_running_loop().time() - started)
    result = await environment.run(activities.call_provider, call())
    assert result.output_text == "".join(WORDS)
    assert len(beats) >= 2, "it heartbeats from the first delay on, while streaming"
    assert beats[0] >= 0.05, "not before the first heartbeat is due"


async def test_a_local_call_never_heartbeats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heartbeat, "FIRST_HEARTBEAT_S", 0.01)
    activities = ProviderActivities({"fake": FakeProvider(word_s=0.03)}, MemoryTokenBus())
    beats: list[object] = []
    environment = env()
    environment.info = dataclasses.replace(environment.info, is_local=True)
    environment.on_heartbeat = lambda *details: beats.append(details)
    await environment.run(activities.call_provider, call())
    assert not beats


async def test_a_retried_attempt_resets_subscribers() -> None:
    bus = MemoryTokenBus()
    listener = asyncio.create_task(collect(bus, "c-1"))
    await asyncio.sleep(0.01)
    flaky = ProviderError("provider.server_error", "boom", retryable=True, status_code=503)
    first = ProviderActivities({"fake": FakeProvider(fail=flaky, fail_after=2)}, bus)
    with pytest.raises(ApplicationError) as raised:
        await env(attempt=1).run(first.call_provider, call())
    assert raised.value.type == "provider.server_error" and not raised.value.non_retryable
    second = ProviderActivities({"fake": FakeProvider()}, bus)
    result = await env(attempt=2).run(second.call_provider, call())
    assert result.output_text == "".join(WORDS)
    events = await listener
    assert [(e.kind, e.attempt) for e in events] == [
        ("token", 1),
        ("token", 1),
        ("error", 1),
        ("reset", 2),
        *[("token", 2)] * 4,
        ("finish", 2),
    ]
    assert events[2].text == "provider.server_error"
    # A client that connects now gets the successful attempt only.
    assert texts(await bus.read("c-1")) == WORDS


async def test_an_unexpected_error_is_published_under_its_class_name() -> None:
    bus = MemoryTokenBus()
    activities = ProviderActivities({"fake": FakeProvider(fail=RuntimeError("oops"), fail_after=1)}, bus)
    with pytest.raises(RuntimeError):
        await env().run(activities.call_provider, call())
    events = await bus.read("c-1")
    assert [(e.kind, e.text) for e in events] == [("token", WORDS[0]), ("error", "RuntimeError")]


class BrokenBus(MemoryTokenBus):
    async def publish(self, correlation_id: str, attempt: int, seq: int, text: str) -> None:
        raise ConnectionError("bus down")


async def test_a_broken_bus_never_fails_the_call(caplog: pytest.LogCaptureFixture) -> None:
    activities = ProviderActivities({"fake": FakeProvider()}, BrokenBus())
    result = await env().run(activities.call_provider, call())
    assert result.output_text == "".join(WORDS)
    assert "streaming stops" in caplog.text


async def test_without_a_bus_the_call_still_works() -> None:
    result = await env().run(ProviderActivities({"fake": FakeProvider()}).call_provider, call())
    assert result.output_text == "".join(WORDS)
