"""The official ``openai`` SDK runs a whole tool loop through turngate, and a slow provider's
turn answers 504 ``turn.wait_timed_out``.

A real Temporal dev server, the worker and the API in process; the provider is the fake OpenAI
server of tests/fakes on 127.0.0.1, which records what turngate sent it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest

from tests.fakes import FakeOpenAIServer
from tests.integration.test_openai_compat import (
    REPLY,
    async_sdk,
    fake_settings,
    keyed_stack,
    openai_fake,  # noqa: F401 (a fixture)
    turn_events,
)
from tests.stack import running_stack
from turngate.api.turn_answer import run
from turngate.worker.run import running_worker

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
THREAD = {"X-Turngate-Thread": "th-tool-loop"}


async def test_a_full_tool_loop_with_the_official_sdk(
    tmp_path: Any,
    temporal_server: Any,
    openai_fake: FakeOpenAIServer,  # noqa: F811
) -> None:
    openai_fake.tool_calls = [{"id": "call_1", "name": "get_weather", "arguments": {"city": "Vilnius"}}]
    openai_fake.reply = ""
    async with keyed_stack(fake_settings(tmp_path, temporal_server, openai_fake)) as stack:
        client = async_sdk(stack, default_headers=THREAD)
        messages: list[Any] = [{"role": "user", "content": "Weather in Vilnius?"}]
        # 1. the model calls the tool
        first = await client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, tools=[WEATHER_TOOL], temperature=0.2
        )
        assert first.choices[0].finish_reason == "tool_calls"
        call = first.choices[0].message.tool_calls[0]
        # 2. the client runs it and sends the result back, with the SDK's own assistant message
        openai_fake.tool_calls, openai_fake.reply = [], REPLY
        messages += [
            first.choices[0].message,
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
        ]
        second = await client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, tools=[WEATHER_TOOL]
        )
        assert second.choices[0].message.content == REPLY
        assert second.choices[0].finish_reason == "stop"
        sent = openai_fake.requests[-1].json
        assert sent["messages"][-2:] == [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Vilnius"})},
                    }
                ],
            },
            {"role": "tool", "content": "sunny, 21 C", "tool_call_id": "call_1"},
        ]
        assert openai_fake.requests[0].json["temperature"] == 0.2 and "temperature" not in sent
        # what the ledger recorded: the call and the question as refs, the result as client context
        firsts, seconds = await turn_events(stack, first.id), await turn_events(stack, second.id)
        intent = seconds["INTENT"]["payload"]
        assert [r["ref_id"] for r in intent["declared_refs"]] == [
            firsts["INTENT"]["digest"],
            firsts["EXECUTION"]["digest"],
        ]
        assert intent["inputs"]["client_context"]["tool_results"] == [
            {"tool_call_id": "call_1", "content": "sunny, 21 C"}
        ]
        assert intent["payload"]["message"] == "sunny, 21 C"
        assert firsts["INTENT"]["payload"]["inputs"]["client_context"]["temperature"] == 0.2
        # 3. the conversation goes on: the whole loop resolves to recorded events
        messages += [second.choices[0].message, {"role": "user", "content": "Thanks!"}]
        third = await client.chat.completions.create(model="gpt-4o-mini", messages=messages)
        thirds = await turn_events(stack, third.id)
        assert len(thirds["INTENT"]["payload"]["declared_refs"]) == 4
        assert "client_context" not in thirds["INTENT"]["payload"]["inputs"]
        roles = [m["role"] for m in openai_fake.requests[-1].json["messages"]]
        assert roles == ["user", "assistant", "tool", "assistant", "user"]
        # the manifest and the turn summary show the temperature; the thread verifies
        turn = (await stack.http.get("/ui/api/turn", params={"correlation_id": first.id})).json()
        assert turn["summary"]["intent"]["temperature"] == 0.2
        report = (await stack.http.get("/verify", params={"thread_id": "th-tool-loop"})).json()
        assert report["ok"] is True, report


async def test_a_streamed_tool_loop_continues(
    tmp_path: Any,
    temporal_server: Any,
    openai_fake: FakeOpenAIServer,  # noqa: F811
) -> None:
    openai_fake.tool_calls = [{"id": "call_7", "name": "get_weather", "arguments": {"city": "Riga"}}]
    async with keyed_stack(fake_settings(tmp_path, temporal_server, openai_fake)) as stack:
        client = async_sdk(stack, default_headers={"X-Turngate-Thread": "th-streamed-loop"})
        messages: list[Any] = [{"role": "user", "content": "Weather in Riga?"}]
        stream = await client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, tools=[WEATHER_TOOL], stream=True
        )
        chunks = [chunk async for chunk in stream]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls]
        call = calls[0][0]
        assert call.id == "call_7" and call.function.name == "get_weather"
        openai_fake.tool_calls = []
        messages += [
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": call.function.model_dump(exclude_none=True),
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.id, "content": "cloudy"},
        ]
        stream = await client.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True)
        answer = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert answer == REPLY
        assert [m["role"] for m in openai_fake.requests[-1].json["messages"]] == ["user", "assistant", "tool"]


async def test_a_turn_slower_than_the_wait_answers_504_and_a_retry_gets_it(
    tmp_path: Any,
    temporal_server: Any,
    openai_fake: FakeOpenAIServer,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The API waits the LLM wall clock plus a margin; a worker allowed more than that (its own
    setting) still runs the slow call. The API gives up with 504 ``turn.wait_timed_out``; the turn
    finishes, and a retry with the same Idempotency-Key returns the recorded answer."""
    openai_fake.delay_s = 3.0
    worker_settings = fake_settings(tmp_path, temporal_server, openai_fake, llm_wall_clock_s=30)
    api_settings = worker_settings.model_copy(update={"llm_wall_clock_s": 1})
    monkeypatch.setattr(run, "RELEASE_MARGIN_S", 0.5)  # the API waits 1.5 s in all
    async with running_worker(worker_settings), keyed_stack(api_settings, worker=False) as stack:
        client = async_sdk(stack, default_headers={"Idempotency-Key": "slow-1"})
        body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "slow"}]}
        started = asyncio.get_running_loop().time()
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(**body)
        waited = asyncio.get_running_loop().time() - started
        assert caught.value.status_code == 504 and caught.value.code == "turn.wait_timed_out"
        assert 1.5 <= waited < 3.0
        headers = caught.value.response.headers
        assert headers["x-turngate-decision"] == "ALLOW"
        cid = headers["x-turngate-correlation-id"]
        for _ in range(100):  # the provider answers after 3 s; the turn is then recorded
            if "EXECUTION" in await turn_events(stack, cid):
                break
            await asyncio.sleep(0.1)
        again = await client.chat.completions.create(**body)
        assert again.id == cid and again.choices[0].message.content == REPLY
        assert len(openai_fake.requests) == 1  # the retry ran nothing again


async def test_a_turn_never_decided_answers_504(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """No worker runs the turn: the API answers 504 (not decided) within its wait."""
    monkeypatch.setattr(run, "RELEASE_MARGIN_S", 0.5)
    async with running_stack(settings.model_copy(update={"llm_wall_clock_s": 1}), worker=False) as stack:
        response = await stack.http.post(
            "/v1/chat/completions", json={"model": "echo-1", "messages": [{"role": "user", "content": "hi"}]}
        )
        assert response.status_code == 504
        assert response.json()["error"]["code"] == "turn.wait_timed_out"
        assert "x-turngate-decision" not in response.headers
