"""Real providers' wire formats through real turns.

A real Temporal dev server, the worker and the API in process, and the official OpenAI /
Anthropic / Ollama SDKs talking to the fake servers of tests/fakes on 127.0.0.1. What is asserted
is what a client and the ledger see (EXECUTION payloads, SSE events) and what the fake server
received (messages, tools, number of attempts).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import FakeAnthropicServer, FakeOllamaServer, FakeOpenAIServer, fake_anthropic, fake_openai
from tests.fakes.llm_servers import fake_ollama
from tests.stack import Stack, make_settings, running_stack
from turngate.settings import Settings

OPENAI_KEY = "sk-test-e2e-openai-0123456789"
ANTHROPIC_KEY = "sk-ant-test-e2e-0123456789"
REPLY = "Hello from the fake server"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trickster"
PACK_INPUTS = json.loads((EXAMPLE / "intent-inputs.json").read_text())


@pytest.fixture
def openai_fake() -> Iterator[FakeOpenAIServer]:
    with fake_openai(REPLY) as server:
        yield server


def openai_settings(tmp_path: Path, temporal_server: Any, server: FakeOpenAIServer, **kw: Any) -> Settings:
    return make_settings(
        tmp_path,
        temporal_server.address,
        openai_api_key=OPENAI_KEY,
        openai_base_url=server.base_url,
        default_provider="openai",
        **kw,
    )


def refs_to(*turns: str) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for turn in turns:
        out += [{"ref_type": "event", "ref_id": turn}, {"ref_type": "execution", "ref_id": turn}]
    return out


def words(text: str) -> int:
    return len(text.split())


def roles_and_contents(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in messages]


async def events_of(stack: Stack, kind: str, thread_id: str | None = None) -> list[dict[str, Any]]:
    params = {"thread_id": thread_id} if thread_id else {}
    snapshot = (await stack.http.get("/snapshot", params=params)).json()
    return [event for event in snapshot["events"] if event["kind"] == kind]


async def two_turns(stack: Stack, **payload: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A first turn, then a second one that declares refs to it (its INTENT and EXECUTION)."""
    first = await stack.chat("What is two plus two?", correlation_id="c-1", thread_id="t", **payload)
    assert first.status_code == 202, first.text
    second = await stack.chat(
        "Explain more",
        correlation_id="c-2",
        thread_id="t",
        parent_turn_id="c-1",
        declared_refs=refs_to("c-1"),
        **payload,
    )
    assert second.status_code == 202, second.text
    return first.json(), second.json()


CONTEXT = [
    ("user", "What is two plus two?"),
    ("assistant", REPLY),
    ("user", "Explain more"),
]


# ------------------------------------------------------------------ OpenAI


async def test_openai_answer_usage_and_declared_context(tmp_path, temporal_server, openai_fake) -> None:
    settings = openai_settings(tmp_path, temporal_server, openai_fake)
    async with running_stack(settings) as stack:
        first, second = await two_turns(stack)
        execution = first["execution"]["payload"]
        assert execution["provider"] == "openai" and execution["model_id"] == "gpt-4o-mini"
        assert execution["output_text"] == REPLY
        assert execution["usage"] == {"input_tokens": words("What is two plus two?"), "output_tokens": 5}
        assert "error" not in execution

        # The second turn declared refs to the first: its user and assistant messages reached the
        # vendor, in order, before the current message.
        assert len(openai_fake.requests) == 2
        body = openai_fake.last_request.json
        assert roles_and_contents(body["messages"]) == CONTEXT
        assert body["model"] == "gpt-4o-mini" and body["stream"] is True
        assert openai_fake.last_request.headers["authorization"] == f"Bearer {OPENAI_KEY}"
        assert "tools" not in body  # no prompt pack: nothing offered
        later = second["execution"]["payload"]
        assert later["output_text"] == REPLY
        assert later["usage"]["input_tokens"] == sum(words(text) for _, text in CONTEXT)


async def test_openai_rate_limit_is_retried_after_retry_after(tmp_path, temporal_server, openai_fake) -> None:
    openai_fake.fail_next(429, retry_after="1")
    settings = openai_settings(tmp_path, temporal_server, openai_fake)
    async with running_stack(settings) as stack:
        body = (await stack.chat("hi", correlation_id="c-429")).json()
        assert body["execution"]["payload"]["output_text"] == REPLY
        assert "error" not in body["execution"]["payload"]
        executions = await events_of(stack, "EXECUTION")
        assert len(executions) == 1
    first, second = openai_fake.requests
    assert second.at - first.at >= 0.9  # Retry-After: 1 was honoured (not the 500 ms default)


async def test_openai_bad_request_is_not_retried(tmp_path, temporal_server, openai_fake) -> None:
    openai_fake.fail_next(400, message=f"invalid 'messages' sent with key {OPENAI_KEY}", times=3)
    settings = openai_settings(tmp_path, temporal_server, openai_fake)
    async with running_stack(settings) as stack:
        body = (await stack.chat("hi", correlation_id="c-400")).json()
        error = body["execution"]["payload"]["error"]
        assert error["code"] == "provider.bad_request"
        assert error["status_code"] == 400 and error["provider"] == "openai"
        assert OPENAI_KEY not in error["message"] and "[redacted]" in error["message"]
        snapshot = (await stack.http.get("/snapshot")).text
        assert OPENAI_KEY not in snapshot
    assert len(openai_fake.requests) == 1


async def test_openai_wall_clock_timeout(tmp_path, temporal_server, openai_fake) -> None:
    # A trickle: every chunk comes well within the SDK's read timeout, the whole answer does not
    # come within the wall clock.
    openai_fake.reply = "one two three four five six seven eight nine ten"
    openai_fake.chunk_delay_s = 0.5
    settings = openai_settings(tmp_path, temporal_server, openai_fake, llm_wall_clock_s=2)
    async with running_stack(settings) as stack:
        body = (await stack.chat("hi", correlation_id="c-slow")).json()
        execution = body["execution"]["payload"]
        assert execution["error"]["code"] == "llm.timeout"
        assert execution["output_text"] == ""
    assert len(openai_fake.requests) == 1  # the wall clock covers every attempt


async def read_until_done(response: Any, on_token: Any) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    kind = None
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:") and kind:
            events.append((kind, json.loads(line[5:])))
            if kind == "token":
                on_token()
            if kind in ("done", "redact", "error"):
                break
    return events


async def test_openai_disconnect_mid_stream_is_retried_and_subscribers_reset(
    tmp_path, temporal_server, openai_fake
) -> None:
    # First request: two chunks, then (once a subscriber has seen a token) the connection drops.
    seen = threading.Event()
    openai_fake.drop_mid_stream_next(after_chunks=2, hold=seen)
    settings = openai_settings(tmp_path, temporal_server, openai_fake)
    async with running_stack(settings) as stack:
        ack = await stack.chat("hi", correlation_id="c-drop", wait=None)
        assert ack.status_code == 202, ack.text
        async with stack.http.stream("GET", "/turns/c-drop/stream") as response:
            assert response.status_code == 200
            events = await asyncio.wait_for(read_until_done(response, seen.set), 20)
        kinds = [kind for kind, _ in events]
        assert "reset" in kinds, kinds
        cut = len(kinds) - 1 - kinds[::-1].index("reset")
        before = "".join(data["text"] for kind, data in events[:cut] if kind == "token")
        after = "".join(data["text"] for kind, data in events[cut:] if kind == "token")
        assert before == "Hello from "  # the void first attempt
        assert after == REPLY  # the retried attempt, whole
        assert events[cut][1]["attempt"] == 2
        assert events[-1][0] == "done" and events[-1][1]["error"] is None
        executions = await events_of(stack, "EXECUTION")
        assert len(executions) == 1 and executions[0]["payload"]["output_text"] == REPLY
    assert len(openai_fake.requests) == 2


async def test_unknown_model_is_denied_before_any_call(tmp_path, temporal_server, openai_fake) -> None:
    settings = openai_settings(tmp_path, temporal_server, openai_fake)
    async with running_stack(settings) as stack:
        body = (await stack.chat("hi", correlation_id="c-model", requested_model_id="no-such-model")).json()
        decision = body["decision"]["payload"]
        assert decision["decision"] == "DENY"
        assert decision["reason_codes"] == ["model.unavailable"]
        assert "execution" not in body
        assert await events_of(stack, "EXECUTION") == []
    assert openai_fake.requests == []


@pytest.fixture
def pack(tmp_path: Path) -> Path:
    target = tmp_path / "prompts"
    shutil.copytree(EXAMPLE / "prompts", target)
    return target


async def test_openai_tools_offered_by_exchange_count_and_calls_recorded(
    tmp_path, temporal_server, openai_fake, pack
) -> None:
    openai_fake.tool_calls = [
        {"id": "call_1", "name": "transition_phase", "arguments": {"signal": "understood"}}
    ]
    settings = openai_settings(tmp_path / "data", temporal_server, openai_fake, prompts_dir=pack)
    async with running_stack(settings) as stack:
        turns: list[dict[str, Any]] = []
        for n, text in enumerate(["Labas", "Kas čia?", "Tai apgaulė"], start=1):
            extra: dict[str, Any] = {}
            if n > 1:
                extra = {
                    "parent_turn_id": f"c-{n - 1}",
                    "declared_refs": refs_to(*[f"c-{i}" for i in range(1, n)]),
                }
            resp = await stack.chat(text, correlation_id=f"c-{n}", thread_id="t", inputs=PACK_INPUTS, **extra)
            assert resp.status_code == 202, resp.text
            turns.append(resp.json())
        sent_tools = [request.json.get("tools") for request in openai_fake.requests]
        # Before two completed exchanges nothing is offered; from then on the tool is.
        assert sent_tools[:2] == [None, None]
        (tool,) = sent_tools[2]
        assert tool["type"] == "function"
        assert tool["function"]["name"] == "transition_phase"
        assert tool["function"]["parameters"]["required"] == ["signal"]
        third = turns[2]
        assert third["decision"]["payload"]["prompt"]["tools_offered"] == ["transition_phase"]
        # The model's calls in the first two turns were to a tool not offered yet: never admitted.
        for early in turns[:2]:
            assert not early["execution"]["payload"].get("tool_calls")
        calls = third["execution"]["payload"]["tool_calls"]
        assert [(call["name"], call["arguments"]) for call in calls] == [
            ("transition_phase", {"signal": "understood"})
        ]


# ------------------------------------------------------------------ Anthropic


@contextlib.contextmanager
def anthropic_fake() -> Iterator[FakeAnthropicServer]:
    with fake_anthropic(REPLY) as server:
        yield server


async def test_anthropic_system_parameter_context_and_usage(tmp_path, temporal_server, pack) -> None:
    with anthropic_fake() as fake:
        settings = make_settings(
            tmp_path / "data",
            temporal_server.address,
            anthropic_api_key=ANTHROPIC_KEY,
            anthropic_base_url=fake.base_url,
            default_provider="anthropic",
            prompts_dir=pack,
        )
        async with running_stack(settings) as stack:
            first, second = await two_turns(stack, inputs=PACK_INPUTS)
            execution = first["execution"]["payload"]
            assert execution["provider"] == "anthropic"
            assert execution["output_text"] == REPLY
            assert execution["usage"]["output_tokens"] == 5
            assert second["execution"]["payload"]["output_text"] == REPLY
        first_body, second_body = (request.json for request in fake.requests)
        # The pack's system prompt goes to the system parameter, never dropped; the declared context
        # arrives as alternating user/assistant messages, in order.
        for body in (first_body, second_body):
            assert "Always respond in Lithuanian." in body["system"]
            assert all(message["role"] != "system" for message in body["messages"])
        assert roles_and_contents(second_body["messages"]) == CONTEXT
        assert execution["usage"]["input_tokens"] == words(first_body["system"]) + words(
            "What is two plus two?"
        )
        headers = fake.requests[0].headers
        assert ANTHROPIC_KEY in (
            headers.get("x-api-key"),
            headers.get("authorization", "").removeprefix("Bearer "),
        )


async def test_anthropic_without_prompt_pack_has_no_system_parameter(tmp_path, temporal_server) -> None:
    with anthropic_fake() as fake:
        settings = make_settings(
            tmp_path,
            temporal_server.address,
            anthropic_api_key=ANTHROPIC_KEY,
            anthropic_base_url=fake.base_url,
            default_provider="anthropic",
        )
        async with running_stack(settings) as stack:
            _, second = await two_turns(stack)
            assert second["execution"]["payload"]["output_text"] == REPLY
        body = fake.last_request.json
        assert "system" not in body
        assert roles_and_contents(body["messages"]) == CONTEXT


# ------------------------------------------------------------------ Ollama


async def test_ollama_answer_usage_and_declared_context(tmp_path, temporal_server) -> None:
    with fake_ollama(REPLY) as fake:
        fake_typed: FakeOllamaServer = fake
        settings = make_settings(
            tmp_path,
            temporal_server.address,
            ollama_host=fake_typed.host,
            default_provider="ollama",
        )
        async with running_stack(settings) as stack:
            first, second = await two_turns(stack)
            execution = first["execution"]["payload"]
            assert execution["provider"] == "ollama" and execution["model_id"] == "llama3.2:latest"
            assert execution["output_text"] == REPLY
            assert execution["usage"] == {"input_tokens": words("What is two plus two?"), "output_tokens": 5}
            assert second["execution"]["payload"]["output_text"] == REPLY
        body = fake_typed.last_request.json
        assert body["model"] == "llama3.2:latest"
        assert roles_and_contents(body["messages"]) == CONTEXT
