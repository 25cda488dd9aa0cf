"""The frameworks against the real ``turngate dev`` command: one child process per module (its own
Temporal dev server, a temp data dir, free ports) whose OpenAI provider is a fake OpenAI upstream
on 127.0.0.1 that streams and calls tools (:class:`ScriptedOpenAI`). Each library is unmodified
except ``base_url`` and the dev API key the command prints, and sends no turngate header: the
openai SDK (plain, streamed, a tool loop, ``parse()``), langchain-openai
``with_structured_output``, openai-agents on its default (Responses) model and the anthropic SDK
on ``/v1/messages``. Each test reads what was recorded through the API and checks ``/verify``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from pydantic import BaseModel

from tests.openai_compat.drop_in import (
    TEXT_ANSWER,
    TOOL_ANSWER,
    ScriptedOpenAI,
    Turn,
    assert_allowed,
    client_context,
)
from turngate.devserver import free_port

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="turngate dev tests run on Linux"
)

agents = pytest.importorskip("agents", reason="openai-agents is a dev dependency")
langchain_openai = pytest.importorskip("langchain_openai", reason="langchain-openai is a dev dependency")

START_DEADLINE_S = 90.0
STOP_DEADLINE_S = 30.0
#: Whatever the developer's shell has set: the child sees only what this test gives it.
FOREIGN_ENV = ("TURNGATE_", "TEMPORAL_", "OPENAI_", "ANTHROPIC_", "OLLAMA_", "DBL_GATEWAY_")


class Forecast(BaseModel):
    city: str
    degrees: int


FORECAST = {"city": "Vilnius", "degrees": 21}
OPENAI_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ANTHROPIC_TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@dataclass
class DevGate:
    """A running ``turngate dev`` and its fake upstream."""

    base: str
    key: str
    upstream: ScriptedOpenAI
    log: Path

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {self.key}"}, timeout=30)


def _start(tmp: Path, upstream: ScriptedOpenAI) -> tuple[subprocess.Popen[bytes], str, Path]:
    api = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN_ENV)}
    env |= {
        "OPENAI_API_KEY": "sk-test-dev-sdk-0123456789",
        "OPENAI_BASE_URL": upstream.base_url,
        "TURNGATE_DEFAULT_PROVIDER": "openai",
        "TURNGATE_LOG_LEVEL": "WARNING",
    }
    command = [sys.executable, "-m", "turngate", "dev", "--data-dir", str(tmp / "data")]
    command += ["--port", str(api), "--temporal-port", str(free_port()), "--ui-port", str(free_port())]
    log = tmp / "dev.log"
    with log.open("wb") as out:  # the child keeps its own descriptor
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    return process, f"http://127.0.0.1:{api}", log


def _wait_for_key(process: subprocess.Popen[bytes], base: str, log: Path) -> str:
    """The dev API key from the banner, once the API answers."""
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        output = log.read_text(errors="replace")
        assert process.poll() is None, f"turngate dev exited:\n{output}"
        printed = re.search(r"dev API key +(\S+)", output)
        with contextlib.suppress(httpx.HTTPError):
            if printed and httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return printed.group(1)
        time.sleep(0.2)
    raise AssertionError(f"turngate dev did not come up:\n{log.read_text(errors='replace')}")


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevGate]:
    agents.set_tracing_disabled(True)  # the trace exporter would call api.openai.com
    upstream = ScriptedOpenAI().start()
    upstream.delay_s = 0.0
    process, base, log = _start(tmp_path_factory.mktemp("turngate-dev"), upstream)
    try:
        yield DevGate(base=base, key=_wait_for_key(process, base, log), upstream=upstream, log=log)
        process.send_signal(signal.SIGINT)
        assert process.wait(STOP_DEADLINE_S) == 0, log.read_text(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        upstream.stop()


@pytest.fixture(autouse=True)
def _fresh_upstream(dev: DevGate) -> None:
    dev.upstream.reset()


def ledger_length(dev: DevGate) -> int:
    with dev.http() as http:
        return int(http.get("/snapshot", params={"limit": 1}).json()["length"])


def recorded_turns(dev: DevGate, since: int) -> list[Turn]:
    """The turns recorded after event index ``since``, in order, read through ``/snapshot``."""
    with dev.http() as http:
        snapshot = http.get("/snapshot", params={"offset": since, "limit": 1000}).json()
    by_turn: dict[str, dict[str, dict[str, Any]]] = {}
    for event in snapshot["events"]:
        by_turn.setdefault(event["correlation_id"], {})[event["kind"]] = event
    return [
        Turn(cid, events["INTENT"]["thread_id"], events["INTENT"], events["DECISION"], events["EXECUTION"])
        for cid, events in by_turn.items()
        if {"INTENT", "DECISION", "EXECUTION"} <= set(events)
    ]


def assert_verifies(dev: DevGate, thread_id: str) -> None:
    with dev.http() as http:
        report = http.get("/verify", params={"thread_id": thread_id}).json()
    assert report["ok"] is True, report


def one_thread(dev: DevGate, turns: list[Turn], count: int) -> None:
    """``count`` allowed turns of one thread, each a full INTENT -> DECISION -> EXECUTION."""
    assert len(turns) == count, turns
    assert {t.thread_id for t in turns} == {turns[0].thread_id}
    for turn in turns:
        assert_allowed(turn)
        assert turn.decision["payload"]["context_digest"]
    assert_verifies(dev, turns[0].thread_id)


def sdk(dev: DevGate) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{dev.base}/v1", api_key=dev.key, max_retries=0)


async def test_openai_sdk_plain_and_streamed(dev: DevGate) -> None:
    since = ledger_length(dev)
    plain = await sdk(dev).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}]
    )
    assert plain.choices[0].message.content == TEXT_ANSWER
    stream = await sdk(dev).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "stream please"}], stream=True
    )
    pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert "".join(pieces) == TEXT_ANSWER and len([p for p in pieces if p]) > 1
    assert dev.upstream.last_request.json["stream"] is True  # streamed from the upstream too
    turns = recorded_turns(dev, since)
    assert turns[0].correlation_id == plain.id and len(turns) == 2
    for turn in turns:
        one_thread(dev, [turn], 1)
        assert turn.execution["payload"]["output_text"] == TEXT_ANSWER


async def test_openai_sdk_tool_loop_without_a_header(dev: DevGate) -> None:
    dev.upstream.arguments = {"get_weather": {"city": "Vilnius"}}
    since = ledger_length(dev)
    client = sdk(dev)
    messages: list[Any] = [{"role": "user", "content": "Weather in Vilnius?"}]
    first = await client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=[OPENAI_TOOL])
    (call,) = first.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Vilnius"}
    messages += [first.choices[0].message, {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21"}]
    second = await client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=[OPENAI_TOOL])
    assert second.choices[0].message.content == TOOL_ANSWER
    turns = recorded_turns(dev, since)
    assert [t.correlation_id for t in turns] == [first.id, second.id]
    one_thread(dev, turns, 2)  # the message chain found the thread: no header
    assert turns[0].execution["payload"]["tool_calls"][0]["name"] == "get_weather"
    assert client_context(turns[1])["tool_results"] == [{"tool_call_id": call.id, "content": "sunny, 21"}]


async def test_openai_sdk_parse(dev: DevGate) -> None:
    dev.upstream.structured = FORECAST
    since = ledger_length(dev)
    completion = await sdk(dev).chat.completions.parse(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Forecast as JSON"}],
        response_format=Forecast,
    )
    assert completion.choices[0].message.parsed == Forecast(**FORECAST)
    (turn,) = recorded_turns(dev, since)
    one_thread(dev, [turn], 1)
    assert client_context(turn)["request_options"]["response_format"]["json_schema"]["name"] == "Forecast"
    assert turn.execution["payload"]["output_check"]["valid"] is True


async def test_langchain_with_structured_output(dev: DevGate) -> None:
    dev.upstream.structured = FORECAST
    since = ledger_length(dev)
    llm = langchain_openai.ChatOpenAI(model="gpt-4o-mini", base_url=f"{dev.base}/v1", api_key=dev.key)
    forecast = await llm.with_structured_output(Forecast).ainvoke("Forecast for Vilnius")
    assert forecast == Forecast(**FORECAST)
    (turn,) = recorded_turns(dev, since)
    one_thread(dev, [turn], 1)
    assert client_context(turn)["request_options"]["response_format"]["type"] == "json_schema"


@agents.function_tool
def get_weather(city: str) -> str:
    """Weather for a city."""
    return f"sunny, 21 in {city}"


async def test_openai_agents_default_responses_model(dev: DevGate) -> None:
    dev.upstream.arguments = {"get_weather": {"city": "Vilnius"}}
    since = ledger_length(dev)
    provider = agents.OpenAIProvider(openai_client=sdk(dev))  # its default model: the Responses API
    agent = agents.Agent(
        name="weather", instructions="Answer briefly.", tools=[get_weather], model="gpt-4o-mini"
    )
    config = agents.RunConfig(model_provider=provider, tracing_disabled=True)
    result = await agents.Runner.run(agent, "Weather in Vilnius?", run_config=config)
    assert result.final_output == TOOL_ANSWER
    turns = recorded_turns(dev, since)
    assert [t.correlation_id for t in turns] == [r.response_id for r in result.raw_responses]
    one_thread(dev, turns, 2)
    assert client_context(turns[1])["tool_results"][0]["content"] == "sunny, 21 in Vilnius"


async def test_anthropic_sdk_plain_and_tool_loop(dev: DevGate) -> None:
    dev.upstream.arguments = {"get_weather": {"city": "Vilnius"}}
    client = anthropic.AsyncAnthropic(base_url=dev.base, api_key=dev.key, max_retries=0)
    since = ledger_length(dev)
    plain = await client.messages.create(
        model="gpt-4o-mini", max_tokens=64, messages=[{"role": "user", "content": "Say hello"}]
    )
    assert plain.content[0].text == TEXT_ANSWER  # type: ignore[union-attr]
    (turn,) = recorded_turns(dev, since)
    assert turn.correlation_id == plain.id
    one_thread(dev, [turn], 1)
    since = ledger_length(dev)
    messages: list[Any] = [{"role": "user", "content": "Weather in Vilnius?"}]
    first = await client.messages.create(
        model="gpt-4o-mini", max_tokens=64, messages=messages, tools=[ANTHROPIC_TOOL]
    )
    assert first.stop_reason == "tool_use"
    (use,) = [block for block in first.content if block.type == "tool_use"]
    assert use.name == "get_weather" and use.input == {"city": "Vilnius"}
    messages += [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21"}]},
    ]
    async with client.messages.stream(
        model="gpt-4o-mini", max_tokens=64, messages=messages, tools=[ANTHROPIC_TOOL]
    ) as stream:
        second = await stream.get_final_message()
    assert second.content[0].text == TOOL_ANSWER  # type: ignore[union-attr]
    turns = recorded_turns(dev, since)
    assert [t.correlation_id for t in turns] == [first.id, second.id]
    one_thread(dev, turns, 2)
    assert turns[1].intent["payload"]["inputs"]["client_context"]["source"] == "anthropic.messages"


async def test_one_turn_as_recorded_and_the_whole_ledger_verifies(dev: DevGate) -> None:
    """One turn's three events read through the API, then GET /verify over the whole ledger
    (with every framework's turns when the module runs in full)."""
    completion = await sdk(dev).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "one more"}]
    )
    with dev.http() as http:
        events = http.get("/snapshot", params={"limit": 1000}).json()["events"]
    kinds = [e for e in events if e["correlation_id"] == completion.id]
    assert [e["kind"] for e in kinds] == ["INTENT", "DECISION", "EXECUTION"]
    intent, decision, execution = kinds
    assert intent["payload"]["payload"]["message"] == "one more"
    assert decision["payload"]["decision"] == "ALLOW"
    assert execution["payload"]["output_text"] == TEXT_ANSWER and not execution["payload"].get("error")
    assert {e["thread_id"] for e in kinds} == {intent["thread_id"]}
    assert [e["index"] for e in kinds] == sorted(e["index"] for e in kinds)
    assert_verifies(dev, intent["thread_id"])  # the dev key is tenant-scoped: one thread
    # the whole ledger: unscoped, as dev auth lets a keyless caller on this machine be
    report = httpx.get(f"{dev.base}/verify", timeout=30).json()
    assert report["ok"] is True and report["thread_id"] is None, report
    decisions = [e for e in events if e["kind"] == "DECISION"]
    assert report["checked_events"] >= len(events) and report["checked_decisions"] >= len(decisions)
    assert report["unchecked_decisions"] == 0, report  # each DECISION recomputed from its inputs
