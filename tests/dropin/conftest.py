"""One turngate stack per test module, with API keys on, in front of fake vendor servers on
127.0.0.1 whose model calls a tool until it is given the tool's result, then answers in text."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import FakeOpenAIServer
from tests.integration.test_openai_compat import keyed_stack
from tests.stack import Stack, make_settings
from turngate.ledger import LedgerStore

REPLY = "Hello from the fake server"
WEATHER_CALL = {"id": "call_w1", "name": "get_weather", "arguments": {"city": "Vilnius"}}


class ToolLoopOpenAI(FakeOpenAIServer):
    """A fake OpenAI server whose model calls ``self.loop_calls`` while tools are offered and the
    last message is not a tool result (a model that uses a tool, then answers)."""

    def __init__(self) -> None:
        super().__init__(REPLY)
        self.loop_calls: list[dict[str, Any]] = []

    def _respond(self, handler: Any, request: Any, stream_error: Any) -> None:
        body = request.json
        calling = bool(self.loop_calls and body.get("tools") and body["messages"][-1]["role"] != "tool")
        self.tool_calls = list(self.loop_calls) if calling else []
        super()._respond(handler, request, stream_error)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LedgerStore]:
    """A real SQLite ledger, for planning without a stack."""
    with LedgerStore(f"sqlite:///{tmp_path / 'ledger.sqlite3'}") as ledger:
        yield ledger


@pytest.fixture(scope="module")
def openai_upstream() -> Iterator[ToolLoopOpenAI]:
    with ToolLoopOpenAI() as server:
        yield server  # type: ignore[misc]


@asynccontextmanager
async def dropin_stack(
    tmp_path: Path, temporal_server: Any, upstream: ToolLoopOpenAI, **settings: Any
) -> AsyncIterator[Stack]:
    """A stack with keys on whose provider is ``upstream`` (``settings``: any others)."""
    made = make_settings(
        tmp_path,
        temporal_server.address,
        openai_api_key="sk-test-dropin-0123456789",
        openai_base_url=upstream.base_url,
        default_provider="openai",
        **settings,
    )
    async with keyed_stack(made) as running:
        yield running


@pytest.fixture(scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory, temporal_server: Any, openai_upstream: ToolLoopOpenAI
) -> AsyncIterator[Stack]:
    async with dropin_stack(tmp_path_factory.mktemp("dropin"), temporal_server, openai_upstream) as running:
        yield running


@pytest.fixture
def upstream(openai_upstream: ToolLoopOpenAI) -> Iterator[ToolLoopOpenAI]:
    openai_upstream.reset()
    openai_upstream.loop_calls = []
    yield openai_upstream


def api_key(stack: Stack) -> str:
    return str(stack.http.headers["Authorization"]).removeprefix("Bearer ")


async def turn_events(stack: Stack, correlation_id: str) -> dict[str, dict[str, Any]]:
    """The recorded events of one turn, by kind."""
    snapshot = (await stack.http.get("/snapshot", params={"limit": 1000})).json()
    return {e["kind"]: e for e in snapshot["events"] if e["correlation_id"] == correlation_id}


async def settled(stack: Stack, correlation_id: str) -> dict[str, dict[str, Any]]:
    """The turn's events once its EXECUTION is recorded (a retried provider call may still run
    after the client saw an error; the next test must not get its upstream request)."""
    for _ in range(300):
        events = await turn_events(stack, correlation_id)
        if "EXECUTION" in events:
            return events
        await asyncio.sleep(0.1)
    raise AssertionError(f"turn {correlation_id} recorded no EXECUTION")


async def verified(stack: Stack, thread_id: str) -> None:
    report = (await stack.http.get("/verify", params={"thread_id": thread_id})).json()
    assert report["ok"] is True, report
