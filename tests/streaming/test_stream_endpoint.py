"""GET /turns/{correlation_id}/stream over real HTTP (uvicorn), with a real ledger and watcher.

The turn is simulated: the test appends INTENT / DECISION / EXECUTION to the ledger and publishes
tokens on the bus as the workflow and the provider activity would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.stack import envelope
from tests.streaming.conftest import REDIS_URL, drop_redis_keys, redis_problem, skip_without_redis
from turngate.api import stream
from turngate.api.state import ApiState
from turngate.api.watcher import LedgerWatcher
from turngate.cli import _uvicorn_server
from turngate.core.events import Event, EventDraft, EventKind, parse_intent
from turngate.devserver import free_port
from turngate.ledger import LedgerStore
from turngate.settings import load_settings
from turngate.streaming.base import TokenBus
from turngate.streaming.memory_bus import MemoryTokenBus
from turngate.streaming.redis_bus import RedisTokenBus
from turngate.streaming.sqlite_bus import SqliteTokenBus

WORDS = [f"žodis{i} " for i in range(12)]
ANSWER = "".join(WORDS)
#: Seconds a stream may take before the test calls it hung: a bound that rules out a hang on a
#: loaded machine, not a speed (the endpoint answers in milliseconds).
HANG_S = 30


@dataclass
class Sse:
    event: str
    data: dict[str, Any]
    id: str | None = None


@dataclass
class Turngate:
    """The stand-in API: the router in a minimal app, a ledger, a watcher and a token bus."""

    store: LedgerStore
    bus: TokenBus | None
    http: httpx.AsyncClient
    state: ApiState
    intents: dict[str, Event] = field(default_factory=dict)

    # ------------------------------------------------------------ the simulated turn

    def intent(self, cid: str, message: str = "Sveiki") -> Event:
        event = self.store.append(parse_intent(envelope(message, correlation_id=cid)).draft())
        self.intents[cid] = event
        return event

    def _next(self, cid: str, kind: EventKind, payload: dict[str, Any]) -> Event:
        intent = self.intents[cid]
        fields = intent.model_dump(include=set(EventDraft.model_fields) - {"kind", "payload"})
        return self.store.append(EventDraft(kind=kind, payload=payload, **fields))

    def decision(self, cid: str, decision: str = "ALLOW", reason_codes: list[str] | None = None) -> Event:
        return self._next(cid, EventKind.DECISION, {"decision": decision, "reason_codes": reason_codes or []})

    def execution(self, cid: str, output_text: str = ANSWER, **payload: Any) -> Event:
        body = {"provider": "fake", "output_text": output_text, "exchanges_count": 1, **payload}
        return self._next(cid, EventKind.EXECUTION, body)

    async def record(self, append: Callable[..., Event], *args: Any, **kwargs: Any) -> Event:
        """``append`` (``decision``, ``execution``) while a client is connected: in a thread, as
        the worker's commit is in its own process. The API and the client share this event loop,
        so a commit held up by a slow fsync on a loaded machine would freeze both."""
        return await asyncio.to_thread(append, *args, **kwargs)

    async def speak(
        self, cid: str, words: list[str], *, attempt: int = 1, error: str | None = None, started: bool = False
    ) -> None:
        """Publish ``words`` as one provider attempt (``started``: its start and first word are out)."""
        assert self.bus is not None
        if not started:
            await self.bus.start(cid, attempt)
        for seq, word in enumerate(words, start=1 if started else 0):
            await self.bus.publish(cid, attempt, seq, word)
            await asyncio.sleep(0.002)
        await self.bus.finish(cid, attempt, error=error)

    async def attach(self, cid: str, first_word: str) -> asyncio.Task[list[Sse]]:
        """A client connected and receiving: attempt 1 has started and its first word arrived."""
        assert self.bus is not None
        first = asyncio.Event()
        client = asyncio.create_task(self.listen(cid, first_token=first))
        await self.bus.start(cid, 1)
        await self.bus.publish(cid, 1, 0, first_word)
        await asyncio.wait_for(first.wait(), HANG_S)
        return client

    # ------------------------------------------------------------ the client

    async def listen(
        self,
        cid: str,
        *,
        last_event_id: str | None = None,
        first_token: asyncio.Event | None = None,
        stop_after_tokens: int | None = None,
    ) -> list[Sse]:
        headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
        got: list[Sse] = []
        async with self.http.stream("GET", f"/turns/{cid}/stream", headers=headers) as resp:
            assert resp.status_code == 200, await resp.aread()
            assert resp.headers["content-type"].startswith("text/event-stream")
            current: dict[str, str] = {}
            async for line in resp.aiter_lines():
                if line.startswith(":"):
                    continue  # ping
                if line:
                    name, _, value = line.partition(":")
                    current[name] = value[1:] if value.startswith(" ") else value
                    continue
                if "event" not in current:
                    current = {}
                    continue
                got.append(Sse(current["event"], json.loads(current["data"]), current.get("id")))
                current = {}
                if got[-1].event == "token" and first_token is not None:
                    first_token.set()
                if (
                    stop_after_tokens is not None
                    and sum(s.event == "token" for s in got) == stop_after_tokens
                ):
                    return got  # the client goes away mid-stream
                if got[-1].event in ("done", "redact"):
                    return got
        return got


def client_text(events: list[Sse]) -> str:
    """What a client shows: tokens appended, a reset clears."""
    text = ""
    for e in events:
        if e.event == "reset":
            text = ""
        elif e.event == "token":
            text += e.data["text"]
    return text


@contextlib.asynccontextmanager
async def serve(
    tmp_path: Path, bus: TokenBus | None, *, wait_timeout_s: float = 5.0
) -> AsyncIterator[Turngate]:
    settings = load_settings(data_dir=tmp_path, wait_timeout_s=wait_timeout_s, port=free_port())
    store = LedgerStore(settings.effective_ledger_url)
    watcher = LedgerWatcher(store)
    watcher.start()
    state = ApiState(settings, None, store, watcher, None, None)  # type: ignore[arg-type]
    app = FastAPI()
    app.include_router(stream.router)
    app.state.turngate = state
    if bus is not None:
        app.state.token_bus = bus
    server = _uvicorn_server(app, settings.host, settings.port)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        async with httpx.AsyncClient(
            base_url=f"http://{settings.host}:{settings.port}", timeout=HANG_S
        ) as http:
            yield Turngate(store, bus, http, state)
    finally:
        server.should_exit = True
        await task
        await watcher.stop()
        store.close()


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def tg(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Turngate]:
    prefix = f"turngate-test:{uuid.uuid4().hex[:10]}:"
    bus: TokenBus
    if request.param == "memory":
        bus = MemoryTokenBus()
    elif request.param == "sqlite":
        bus = SqliteTokenBus(tmp_path / "stream.sqlite3")
    else:
        skip_without_redis(await redis_problem())
        bus = RedisTokenBus(REDIS_URL, key_prefix=prefix)
    try:
        async with serve(tmp_path, bus) as turngate:
            yield turngate
    finally:
        await bus.aclose()
        if request.param == "redis":
            await drop_redis_keys(prefix)


async def test_tokens_stream_live_then_done(tg: Turngate) -> None:
    tg.intent("c-1")
    tg.decision("c-1")
    first = asyncio.Event()
    client = asyncio.create_task(tg.listen("c-1", first_token=first))
    await asyncio.sleep(0.05)
    await tg.bus.start("c-1", 1)  # type: ignore[union-attr]
    await tg.bus.publish("c-1", 1, 0, WORDS[0])  # type: ignore[union-attr]
    await asyncio.wait_for(first.wait(), HANG_S)  # the first token arrives while the turn is running
    assert not client.done()
    for seq, word in enumerate(WORDS[1:], start=1):
        await tg.bus.publish("c-1", 1, seq, word)  # type: ignore[union-attr]
    await tg.bus.finish("c-1", 1)  # type: ignore[union-attr]
    execution = await tg.record(tg.execution, "c-1", phase_transition="understood", next_phase="debrief")
    events = await asyncio.wait_for(client, HANG_S)
    tokens = [e for e in events if e.event == "token"]
    assert [t.data for t in tokens] == [{"text": w, "seq": i, "attempt": 1} for i, w in enumerate(WORDS)]
    assert all(t.id for t in tokens)
    assert [e.event for e in events] == ["token"] * len(WORDS) + ["done"]
    assert events[-1].data == {
        "phase_transition": "understood",
        "next_phase": "debrief",
        "exchanges_count": 1,
        "correlation_id": "c-1",
        "execution_index": execution.index,
        "error": None,
    }


async def test_deny_ends_at_once(tg: Turngate) -> None:
    tg.intent("c-deny")
    tg.decision("c-deny", "DENY", ["policy.max_user_messages"])
    events = await asyncio.wait_for(tg.listen("c-deny"), HANG_S)
    assert [(e.event, e.data) for e in events] == [
        (
            "done",
            {"decision": "DENY", "reason_codes": ["policy.max_user_messages"], "correlation_id": "c-deny"},
        )
    ]


async def test_deny_recorded_while_connected(tg: Turngate) -> None:
    tg.intent("c-deny")
    client = asyncio.create_task(tg.listen("c-deny"))
    await asyncio.sleep(0.05)
    await tg.record(tg.decision, "c-deny", "DENY", ["gateway.observer_mode"])
    events = await asyncio.wait_for(client, HANG_S)
    assert [e.event for e in events] == ["done"]
    assert events[0].data["reason_codes"] == ["gateway.observer_mode"]


async def test_a_failed_review_check_does_not_end_the_stream(
    tg: Turngate, caplog: pytest.LogCaptureFixture
) -> None:
    # A turn without its DECISION is asked whether it waits for a reviewer; the stand-in API has
    # no Temporal client, so that check fails. The DENY is recorded only once it has: the stream
    # still ends with the DENY's done (a failed check used to break the connection instead).
    tg.intent("c-check")
    with caplog.at_level(logging.ERROR, logger=stream.__name__):
        client = asyncio.create_task(tg.listen("c-check"))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HANG_S
        while not any("review check" in r.getMessage() for r in caplog.records):
            assert not client.done(), client.result()
            assert loop.time() < deadline, "the review check never ran"
            await asyncio.sleep(0.05)
        await tg.record(tg.decision, "c-check", "DENY", ["gateway.observer_mode"])
        events = await asyncio.wait_for(client, HANG_S)
    assert [(e.event, e.data["decision"]) for e in events] == [("done", "DENY")]


async def test_late_connect_gets_the_full_answer_from_the_bus(tg: Turngate) -> None:
    tg.intent("c-late")
    tg.decision("c-late")
    await tg.speak("c-late", WORDS)
    tg.execution("c-late")
    events = await asyncio.wait_for(tg.listen("c-late"), HANG_S)
    assert [e.event for e in events] == ["token"] * len(WORDS) + ["done"]
    assert client_text(events) == ANSWER
    assert all("source" not in e.data for e in events)


async def test_late_connect_after_the_bus_expired_gets_the_answer_from_the_ledger(tg: Turngate) -> None:
    tg.intent("c-old")
    tg.decision("c-old")
    tg.execution("c-old")  # nothing on the bus (expired, or a worker without one)
    events = await asyncio.wait_for(tg.listen("c-old"), HANG_S)
    assert [(e.event, e.data.get("source")) for e in events] == [("token", "ledger"), ("done", None)]
    assert events[0].data == {"text": ANSWER, "seq": 0, "attempt": 0, "source": "ledger"}


async def test_resume_with_last_event_id(tg: Turngate) -> None:
    tg.intent("c-r")
    tg.decision("c-r")
    await tg.bus.start("c-r", 1)  # type: ignore[union-attr]
    for seq, word in enumerate(WORDS[:6]):
        await tg.bus.publish("c-r", 1, seq, word)  # type: ignore[union-attr]
    first = await asyncio.wait_for(tg.listen("c-r", stop_after_tokens=4), HANG_S)  # drops after 4 tokens
    last_id = [e for e in first if e.event == "token"][-1].id
    for seq, word in enumerate(WORDS[6:], start=6):
        await tg.bus.publish("c-r", 1, seq, word)  # type: ignore[union-attr]
    await tg.bus.finish("c-r", 1)  # type: ignore[union-attr]
    resumed = asyncio.create_task(tg.listen("c-r", last_event_id=last_id))
    await asyncio.sleep(0.05)
    await tg.record(tg.execution, "c-r")
    second = await asyncio.wait_for(resumed, HANG_S)
    assert [e.data["seq"] for e in second if e.event == "token"] == list(range(4, len(WORDS)))
    assert second[-1].event == "done"
    assert client_text(first) + client_text(second) == ANSWER


async def test_resume_with_a_position_the_bus_does_not_know(tg: Turngate) -> None:
    tg.intent("c-x")
    tg.decision("c-x")
    await tg.speak("c-x", WORDS)
    tg.execution("c-x")
    events = await asyncio.wait_for(tg.listen("c-x", last_event_id="not-a-position"), HANG_S)
    assert events[0].event == "reset" and events[0].data["source"] == "resume"
    assert client_text(events) == ANSWER  # the reset voids whatever the client held


async def test_resume_after_the_bus_expired_replaces_the_text(tg: Turngate) -> None:
    tg.intent("c-gone")
    tg.decision("c-gone")
    tg.execution("c-gone")
    stale = "12345-0" if isinstance(tg.bus, RedisTokenBus) else "12345"  # a well-formed position
    events = await asyncio.wait_for(tg.listen("c-gone", last_event_id=stale), HANG_S)
    assert [(e.event, e.data.get("source")) for e in events] == [
        ("reset", "ledger"),
        ("token", "ledger"),
        ("done", None),
    ]
    assert client_text(events) == ANSWER


async def test_reset_mid_stream(tg: Turngate) -> None:
    tg.intent("c-retry")
    tg.decision("c-retry")
    client = await tg.attach("c-retry", "half ")
    await tg.speak("c-retry", ["an "], error="provider.server_error", started=True)
    await tg.speak("c-retry", WORDS, attempt=2)
    await tg.record(tg.execution, "c-retry")
    events = await asyncio.wait_for(client, HANG_S)
    assert [e.event for e in events] == ["token", "token", "reset"] + ["token"] * len(WORDS) + ["done"]
    assert events[2].data == {"attempt": 2}
    assert {e.data["attempt"] for e in events[3:-1]} == {2}
    assert client_text(events) == ANSWER


async def test_failed_turn_voids_the_partial_text(tg: Turngate) -> None:
    tg.intent("c-fail")
    tg.decision("c-fail")
    client = await tg.attach("c-fail", "partial ")
    await tg.bus.finish("c-fail", 1, error="llm.timeout")  # type: ignore[union-attr]
    error = {"provider": "fake", "status_code": None, "code": "llm.timeout", "message": "too slow"}
    await tg.record(tg.execution, "c-fail", output_text="", error=error)
    events = await asyncio.wait_for(client, HANG_S)
    assert [e.event for e in events] == ["token", "reset", "done"]
    assert events[-1].data["error"] == error
    assert client_text(events) == ""


async def test_redacted_answer(tg: Turngate) -> None:
    tg.intent("c-red")
    tg.decision("c-red")
    client = await tg.attach("c-red", WORDS[0])
    await tg.speak("c-red", WORDS[1:], started=True)
    redaction = {"reason_code": "safety.blocked_topic"}
    await tg.record(tg.execution, "c-red", output_text="", redacted=True, redaction=redaction)
    events = await asyncio.wait_for(client, HANG_S)
    # A redacted EXECUTION ends the stream at once: the tokens still on the bus are not sent
    # (how many were sent before depends on which the endpoint saw first).
    assert [e.event for e in events] == ["token"] * (len(events) - 1) + ["redact"]
    assert 1 <= len(events) - 1 <= len(WORDS)
    assert [e.data["text"] for e in events[:-1]] == WORDS[: len(events) - 1]
    assert events[-1].data == {"reason": "safety.blocked_topic"}
    # Connecting later: the redacted text is not replayed.
    late = await asyncio.wait_for(tg.listen("c-red"), HANG_S)
    assert [(e.event, e.data) for e in late] == [("redact", {"reason": "safety.blocked_topic"})]


async def test_a_turn_recorded_while_streaming_is_followed(tg: Turngate) -> None:
    # The INTENT is recorded (POST /ingress/intent answered 202), the rest comes while streaming.
    tg.intent("c-soon")
    client = asyncio.create_task(tg.listen("c-soon"))
    await asyncio.sleep(0.1)
    await tg.record(tg.decision, "c-soon")
    await tg.speak("c-soon", WORDS)
    await tg.record(tg.execution, "c-soon")
    events = await asyncio.wait_for(client, HANG_S)
    assert client_text(events) == ANSWER and events[-1].event == "done"


async def test_an_unknown_turn_is_404_at_once(tmp_path: Path) -> None:
    # Nothing waits for an id nobody may ever send: with a wait timeout far longer than the
    # client's, the answer still comes (before, the request was held for the whole timeout).
    async with serve(tmp_path, MemoryTokenBus(), wait_timeout_s=600) as turngate:
        resp = await turngate.http.get("/turns/nope/stream", timeout=20)
    assert resp.status_code == 404
    assert resp.json()["ok"] is False and resp.json()["reason_code"] == "turn.not_found"
    assert "nope" in resp.json()["detail"]


async def test_without_a_bus_the_answer_comes_from_the_ledger(tmp_path: Path) -> None:
    async with serve(tmp_path, None) as turngate:
        turngate.intent("c-nobus")
        turngate.decision("c-nobus")
        client = asyncio.create_task(turngate.listen("c-nobus"))
        await asyncio.sleep(0.05)
        await turngate.record(turngate.execution, "c-nobus")
        events = await asyncio.wait_for(client, HANG_S)
    assert [e.event for e in events] == ["token", "done"]
    assert client_text(events) == ANSWER


async def test_helper_reports_an_unknown_turn_as_an_event(tg: Turngate) -> None:
    messages = [
        m async for m in stream.stream_turn_events(tg.state, "ghost", None, bus=tg.bus, find_timeout_s=0.05)
    ]
    assert [m["event"] for m in messages] == ["error"]
    assert json.loads(messages[0]["data"])["reason_code"] == "turn.not_found"


async def test_helper_streams_for_ingress(tg: Turngate) -> None:
    tg.intent("c-h")
    tg.decision("c-h")
    await tg.speak("c-h", WORDS)
    tg.execution("c-h")
    messages = [m async for m in stream.stream_turn_events(tg.state, "c-h", None, bus=tg.bus)]
    assert [m["event"] for m in messages] == ["token"] * len(WORDS) + ["done"]
