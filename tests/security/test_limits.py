"""Limits: per-key token bucket (429 rate.limited + Retry-After, then recovers), concurrent
streams per key, body/message size, refs and tools counts; all configurable, all in /capabilities."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from tests.security.conftest import bearer, make_key
from tests.stack import envelope, make_settings, running_stack
from turngate.devserver import DevServer
from turngate.security.ratelimit import RateLimiter
from turngate.security.streams import StreamSlots
from turngate.settings import Settings, load_settings


def test_the_default_auth_mode_is_keys_and_dev_is_opt_in() -> None:
    assert Settings.model_fields["auth_mode"].default == "keys"
    assert load_settings(TURNGATE_AUTH="dev").auth_mode == "dev"


def test_token_bucket_refills_at_the_configured_rate() -> None:
    now = [0.0]
    limiter = RateLimiter(2.0, 3, clock=lambda: now[0])
    assert [limiter.acquire("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.acquire("k") == 0.5  # one token in half a second at 2/s
    assert limiter.acquire("other") == 0.0  # per key
    now[0] = 0.5
    assert limiter.acquire("k") == 0.0


async def _messages(count: int) -> AsyncIterator[int]:
    for number in range(count):
        yield number


async def test_a_held_stream_gives_its_slot_back_exactly_once() -> None:
    slots = StreamSlots(1)
    # ends normally
    assert slots.try_acquire("k")
    assert [m async for m in slots.hold("k", _messages(2))] == [0, 1]
    assert slots.open_count("k") == 0
    # closed mid-stream (the client went away)
    assert slots.try_acquire("k")
    held = slots.hold("k", _messages(5))
    assert await anext(held) == 0
    await held.aclose()
    del held
    gc.collect()
    assert slots.open_count("k") == 0
    # dropped before its first message: a generator that never ran has no finally to run
    assert slots.try_acquire("k") and slots.try_acquire("other")
    unstarted = slots.hold("k", _messages(1))
    del unstarted
    gc.collect()
    assert slots.open_count("k") == 0 and slots.open_count("other") == 1  # once, and only its own


async def test_rate_limit_answers_429_with_retry_after_then_recovers(
    tmp_path: Path, temporal_server: DevServer
) -> None:
    settings = make_settings(
        tmp_path, temporal_server.address, auth_mode="keys", rate_limit_per_s=1.0, rate_limit_burst=3
    )
    key, other = make_key(settings, "acme", "snapshot.read"), make_key(settings, "acme", "snapshot.read")
    async with running_stack(settings, worker=False) as stack:
        codes = [(await stack.http.get("/snapshot", headers=bearer(key))).status_code for _ in range(3)]
        assert codes == [200, 200, 200]
        limited = await stack.http.get("/snapshot", headers=bearer(key))
        assert limited.status_code == 429
        assert limited.json()["reason_code"] == "rate.limited"
        retry = int(limited.headers["retry-after"])
        assert retry >= 1
        assert (await stack.http.get("/snapshot", headers=bearer(other))).status_code == 200  # per key
        await asyncio.sleep(retry)
        assert (await stack.http.get("/snapshot", headers=bearer(key))).status_code == 200


async def test_concurrent_streams_per_key(tmp_path: Path, temporal_server: DevServer) -> None:
    settings = make_settings(tmp_path, temporal_server.address, auth_mode="keys", max_streams_per_key=1)
    key = make_key(settings, "acme", "snapshot.read")
    async with running_stack(settings, worker=False) as stack:
        async with stack.http.stream("GET", "/tail", headers=bearer(key)) as first:
            assert first.status_code == 200
            second = await stack.http.get("/tail", headers=bearer(key))
            assert second.status_code == 429
            assert second.json()["reason_code"] == "rate.too_many_streams"
            assert second.headers["retry-after"] == "1"
        for _ in range(50):  # the slot comes back once the server sees the client gone
            async with stack.http.stream("GET", "/tail", headers=bearer(key)) as again:
                if again.status_code == 200:
                    break
            await asyncio.sleep(0.1)
        assert again.status_code == 200


async def test_size_and_count_limits_refuse_before_anything_is_recorded(
    tmp_path: Path, temporal_server: DevServer
) -> None:
    settings = make_settings(
        tmp_path,
        temporal_server.address,
        auth_mode="keys",
        max_body_bytes=4096,
        max_message_bytes=1000,
        max_declared_refs=2,
        max_declared_tools=1,
    )
    key = make_key(settings, "acme", "intent.write,snapshot.read")
    async with running_stack(settings, worker=False) as stack:

        async def post(body: dict | bytes) -> httpx.Response:
            if isinstance(body, bytes):
                return await stack.http.post("/ingress/intent", content=body, headers=bearer(key))
            return await stack.http.post("/ingress/intent", json=body, headers=bearer(key))

        big_body = await post(b"{" + b" " * 5000 + b"}")
        assert big_body.status_code == 413 and big_body.json()["reason_code"] == "admission.payload_too_large"
        big_message = await post(envelope("x" * 1001, correlation_id="c-1"))
        assert big_message.status_code == 413
        refs = [{"ref_id": f"r{i}"} for i in range(3)]
        too_many_refs = await post(envelope("hi", correlation_id="c-2", declared_refs=refs))
        assert too_many_refs.status_code == 422
        assert too_many_refs.json()["reason_code"] == "admission.too_many_refs"
        too_many_tools = await post(envelope("hi", correlation_id="c-3", declared_tools=["a", "b"]))
        assert too_many_tools.status_code == 422
        assert too_many_tools.json()["reason_code"] == "admission.too_many_tools"
        assert (await stack.http.get("/snapshot", headers=bearer(key))).json()["length"] == 0

        limits = (await stack.http.get("/capabilities", headers=bearer(key))).json()["limits"]
        assert limits["max_body_bytes"] == 4096
        assert limits["max_message_bytes"] == 1000
        assert limits["max_declared_refs"] == 2
        assert limits["max_declared_tools"] == 1
        assert limits["rate_limit_per_s"] == settings.rate_limit_per_s
        assert limits["rate_limit_burst"] == settings.rate_limit_burst
        assert limits["max_streams_per_key"] == settings.max_streams_per_key
