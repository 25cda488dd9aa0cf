"""The official ``anthropic`` SDK, unmodified but for base_url and key, against ``/v1/messages``:
text, streaming (``messages.stream`` and ``stream=True``), a tool loop, errors in Anthropic's shape.

One stack per module (a real Temporal dev server, the worker and the API in process) with keys
on; the provider is a fake OpenAI server on 127.0.0.1 that streams and calls a tool until it is
given the result. Each test checks what the ledger recorded and that the thread verifies.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import httpx
import pytest
from pydantic import BaseModel

from tests.dropin.conftest import (
    REPLY,
    WEATHER_CALL,
    ToolLoopOpenAI,
    api_key,
    settled,
    turn_events,
    verified,
)
from tests.stack import Stack

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def client(stack: Stack, **kw: Any) -> anthropic.AsyncAnthropic:
    # The SDK adds /v1/messages to the base URL; the key goes as x-api-key.
    return anthropic.AsyncAnthropic(
        base_url=str(stack.http.base_url), api_key=api_key(stack), max_retries=0, **kw
    )


async def test_text_is_one_recorded_turn(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    sync = anthropic.Anthropic(base_url=str(stack.http.base_url), api_key=api_key(stack), max_retries=0)
    raw = await asyncio.to_thread(
        sync.messages.with_raw_response.create,
        model="gpt-4o-mini",
        max_tokens=64,
        system="Be brief.",
        messages=[{"role": "user", "content": "Say hello"}],
    )
    message = raw.parse()
    assert message.type == "message" and message.role == "assistant"
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == REPLY  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn" and message.id.startswith("msg_")
    assert message.usage.output_tokens == len(REPLY.split())
    assert raw.headers["x-turngate-correlation-id"] == message.id
    events = await turn_events(stack, message.id)
    assert set(events) == {"INTENT", "DECISION", "EXECUTION"}
    intent = events["INTENT"]["payload"]
    assert intent["payload"]["message"] == "Say hello"
    assert intent["budget"] == {"max_tokens": 64}
    context = intent["inputs"]["client_context"]
    assert context["source"] == "anthropic.messages"
    assert context["messages"] == [{"role": "system", "content": "Be brief.", "source": "system"}]
    assert upstream.last_request.json["messages"][-1] == {"role": "user", "content": "Say hello"}
    await verified(stack, events["INTENT"]["thread_id"])


async def test_messages_stream(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    async with client(stack).messages.stream(
        model="gpt-4o-mini", max_tokens=64, messages=[{"role": "user", "content": "Stream it"}]
    ) as stream:
        texts = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert "".join(texts) == REPLY and len(texts) > 1
    assert final.content[0].text == REPLY  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == len(REPLY.split())
    events = await turn_events(stack, final.id)
    assert events["EXECUTION"]["payload"]["output_text"] == REPLY
    await verified(stack, events["INTENT"]["thread_id"])


async def test_raw_stream_events(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    upstream.loop_calls = [WEATHER_CALL]
    stream = await client(stack).messages.create(
        model="gpt-4o-mini",
        max_tokens=64,
        messages=[{"role": "user", "content": "Weather?"}],
        tools=[WEATHER_TOOL],
        stream=True,
    )
    kinds = [event.type async for event in stream]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_start") == 2  # the text, then the tool call
    events = await turn_events(stack, stream.response.headers["x-turngate-correlation-id"])
    assert events["DECISION"]["payload"]["decision"] == "ALLOW"
    assert events["EXECUTION"]["payload"]["output_text"] == REPLY
    assert events["EXECUTION"]["payload"]["tool_calls"] == [WEATHER_CALL]
    await verified(stack, events["INTENT"]["thread_id"])


async def test_a_tool_loop_without_a_thread_header(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    """The SDK's usual loop: the model calls a tool, the client resends the conversation with the
    result. The tool-use id names the turn, so the call continues its thread."""
    upstream.loop_calls = [WEATHER_CALL]
    upstream.reply = ""
    sdk = client(stack)
    messages: list[Any] = [{"role": "user", "content": "Weather in Vilnius?"}]
    first = await sdk.messages.create(
        model="gpt-4o-mini", max_tokens=64, messages=messages, tools=[WEATHER_TOOL]
    )
    assert first.stop_reason == "tool_use"
    (use,) = first.content
    assert use.type == "tool_use" and use.name == "get_weather" and use.input == {"city": "Vilnius"}
    messages += [
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21 C"}],
        },
    ]
    upstream.reply = REPLY
    async with sdk.messages.stream(
        model="gpt-4o-mini", max_tokens=64, messages=messages, tools=[WEATHER_TOOL]
    ) as stream:
        second = await stream.get_final_message()
    assert second.content[0].text == REPLY and second.stop_reason == "end_turn"  # type: ignore[union-attr]
    # the provider got the loop with the recorded call id
    sent = upstream.last_request.json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["id"] == "call_w1" and sent[2]["tool_call_id"] == "call_w1"
    firsts, seconds = await turn_events(stack, first.id), await turn_events(stack, second.id)
    assert seconds["INTENT"]["thread_id"] == firsts["INTENT"]["thread_id"]
    intent = seconds["INTENT"]["payload"]
    assert [r["ref_id"] for r in intent["declared_refs"]] == [
        firsts["INTENT"]["digest"],
        firsts["EXECUTION"]["digest"],
    ]
    assert intent["inputs"]["client_context"]["tool_results"] == [
        {"tool_call_id": "call_w1", "content": "sunny, 21 C"}
    ]
    assert seconds["DECISION"]["payload"]["decision"] == "ALLOW"
    assert firsts["EXECUTION"]["payload"]["tool_calls"] == [WEATHER_CALL]
    await verified(stack, firsts["INTENT"]["thread_id"])


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "anthropic.unsupported_tool"),
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "anthropic.unsupported_parameter"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            "anthropic.unsupported_content",
        ),
        ({"messages": [{"role": "assistant", "content": "Hi"}]}, "openai.last_message_not_user"),
        (
            {
                "system": "Be brief.",
                "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
            },
            "openai.last_message_not_user",
        ),
    ],
)
async def test_what_cannot_be_honoured_is_a_400_in_anthropic_shape(
    stack: Stack, upstream: ToolLoopOpenAI, args: dict[str, Any], code: str
) -> None:
    body: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
    }
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client(stack).messages.create(**(body | args))
    error = caught.value.body
    assert isinstance(error, dict) and error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error" and error["error"]["code"] == code
    if code == "openai.last_message_not_user":  # named as the request has it, not as translated
        last = len(body["messages"] if "messages" not in args else args["messages"]) - 1
        assert error["error"]["param"] == f"messages[{last}]"
        assert f"messages[{last}] is" in error["error"]["message"]
    assert upstream.requests == []


async def test_deny_is_a_permission_error(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    with pytest.raises(anthropic.PermissionDeniedError) as caught:
        await client(stack).messages.create(
            model="no-such-model", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.body["error"] == {  # type: ignore[index]
        "type": "permission_error",
        "message": caught.value.body["error"]["message"],  # type: ignore[index]
        "code": "model.unavailable",
    }
    headers = caught.value.response.headers
    assert headers["x-turngate-decision"] == "DENY"
    assert headers["x-turngate-reason-code"] == "model.unavailable"
    assert headers["x-should-retry"] == "false"  # a retry finds the same recorded DENY


async def test_keys_as_x_api_key_or_bearer(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    body = {"model": "gpt-4o-mini", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    base = str(stack.http.base_url)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        assert (
            await http.post("/v1/messages", json=body, headers={"x-api-key": api_key(stack)})
        ).status_code == 200
        bearer = {"Authorization": f"Bearer {api_key(stack)}"}
        assert (await http.post("/v1/messages", json=body, headers=bearer)).status_code == 200
        wrong = await http.post("/v1/messages", json=body, headers={"x-api-key": "tg_wrong"})
        assert wrong.status_code == 401
        # elsewhere x-api-key is not a key
        other = await http.post(
            "/v1/responses", json={"model": "m", "input": "hi"}, headers={"x-api-key": api_key(stack)}
        )
        assert other.status_code == 401
    # the SDK's auth_token (Authorization: Bearer) works too
    sdk = anthropic.AsyncAnthropic(base_url=base, auth_token=api_key(stack), max_retries=0)
    message = await sdk.messages.create(**body)  # type: ignore[arg-type]
    assert message.content[0].text == REPLY  # type: ignore[union-attr]


async def test_a_text_conversation_on_a_named_thread(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    """A thread named by the header: the resent exchange matches its recorded events."""
    sdk = client(stack, default_headers={"X-Turngate-Thread": "th-anthropic-text"})
    messages: list[Any] = [{"role": "user", "content": "What is two plus two?"}]
    first = await sdk.messages.create(model="gpt-4o-mini", max_tokens=64, messages=messages)
    messages += [{"role": "assistant", "content": first.content}, {"role": "user", "content": "Why?"}]
    second = await sdk.messages.create(model="gpt-4o-mini", max_tokens=64, messages=messages)
    seconds = await turn_events(stack, second.id)
    assert seconds["INTENT"]["thread_id"] == "th-anthropic-text"
    assert len(seconds["INTENT"]["payload"]["declared_refs"]) == 2
    await verified(stack, "th-anthropic-text")


async def test_a_text_conversation_continues_without_a_header(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    """A stateless text chat: the messages before the last answer are the first call's, so the
    second call continues its thread (the chat path's rule, with ``msg_`` ids)."""
    sdk = client(stack)
    messages: list[Any] = [{"role": "user", "content": "What is three plus three?"}]
    first = await sdk.messages.create(model="gpt-4o-mini", max_tokens=64, messages=messages)
    messages += [{"role": "assistant", "content": first.content}, {"role": "user", "content": "Why?"}]
    second = await sdk.messages.create(model="gpt-4o-mini", max_tokens=64, messages=messages)
    firsts, seconds = await turn_events(stack, first.id), await turn_events(stack, second.id)
    assert second.id != first.id and second.id.startswith("msg_")
    assert seconds["INTENT"]["thread_id"] == firsts["INTENT"]["thread_id"]
    assert seconds["INTENT"]["parent_turn_id"] == first.id
    intent = seconds["INTENT"]["payload"]
    assert [r["ref_id"] for r in intent["declared_refs"]] == [
        firsts["INTENT"]["digest"],
        firsts["EXECUTION"]["digest"],
    ]
    assert [m["role"] for m in upstream.last_request.json["messages"]] == ["user", "assistant", "user"]
    await verified(stack, firsts["INTENT"]["thread_id"])


async def test_a_retry_is_the_first_attempts_turn(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    """The SDK's retry (``x-stainless-retry-count`` above 0) answers the recorded turn; the same
    messages sent again, not as a retry, are a new turn."""
    body = {"model": "gpt-4o-mini", "max_tokens": 16, "messages": [{"role": "user", "content": "Once?"}]}
    key = {"x-api-key": api_key(stack)}
    async with httpx.AsyncClient(base_url=str(stack.http.base_url), timeout=30) as http:
        first = await http.post("/v1/messages", json=body, headers=key | {"x-stainless-retry-count": "0"})
        retry = await http.post("/v1/messages", json=body, headers=key | {"x-stainless-retry-count": "1"})
        again = await http.post("/v1/messages", json=body, headers=key)
    assert first.status_code == retry.status_code == again.status_code == 200
    assert retry.json()["id"] == first.json()["id"] != again.json()["id"]
    assert len(upstream.requests) == 2  # the retry called no provider


async def test_forced_tool_choice_and_sampling_reach_the_provider(
    stack: Stack, upstream: ToolLoopOpenAI
) -> None:
    upstream.loop_calls = [WEATHER_CALL]
    message = await client(stack).messages.create(
        model="gpt-4o-mini",
        max_tokens=64,
        messages=[{"role": "user", "content": "Vilnius, please"}],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        stop_sequences=["END"],
        extra_body={"top_p": 0.5},  # this SDK version has no top_p argument; the API has
    )
    assert message.stop_reason == "tool_use"
    sent = upstream.last_request.json
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent["parallel_tool_calls"] is False and sent["top_p"] == 0.5 and sent["stop"] == ["END"]
    events = await turn_events(stack, message.id)
    options = events["INTENT"]["payload"]["inputs"]["client_context"]["request_options"]
    assert options == {
        "tool_choice": {"mode": "function", "name": "get_weather"},
        "parallel_tool_calls": False,
        "top_p": 0.5,
        "stop": ["END"],
    }
    await verified(stack, events["INTENT"]["thread_id"])


async def test_provider_overload_is_an_overloaded_error(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    upstream.fail_next(503, retry_after="0", times=5)
    with pytest.raises(anthropic.InternalServerError) as caught:
        await client(stack).messages.create(
            model="gpt-4o-mini", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.status_code == 503
    assert caught.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert caught.value.body["error"]["code"] == "provider.overloaded"  # type: ignore[index]
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.response.headers["x-should-retry"] == "false"


async def test_a_stream_retried_after_text_ends_with_an_error_event(
    stack: Stack, upstream: ToolLoopOpenAI
) -> None:
    upstream.error_mid_stream_next("overloaded_error")
    received: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as caught:
        async with client(stack).messages.stream(
            model="gpt-4o-mini", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            async for text in stream.text_stream:
                received.append(text)
    assert received  # text had been sent before the retry
    assert caught.value.body["error"]["code"] == "stream.reset"  # type: ignore[index]
    events = await settled(stack, caught.value.response.headers["x-turngate-correlation-id"])
    assert events["EXECUTION"]["payload"]["output_text"] == REPLY  # the retry's answer


async def test_a_streamed_deny_is_a_403_before_any_event(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    with pytest.raises(anthropic.PermissionDeniedError) as caught:
        async with client(stack).messages.stream(
            model="no-such-model", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            await stream.get_final_message()
    assert caught.value.body["error"]["code"] == "model.unavailable"  # type: ignore[index]


class Weather(BaseModel):
    city: str
    sky: str


async def test_structured_output_parses(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    upstream.reply = json.dumps({"city": "Vilnius", "sky": "clear"})
    message = await client(stack).messages.parse(
        model="gpt-4o-mini",
        max_tokens=64,
        messages=[{"role": "user", "content": "Weather?"}],
        output_format=Weather,
    )
    assert message.parsed_output == Weather(city="Vilnius", sky="clear")
    # the format reaches the provider, is recorded, and the answer is checked against it
    sent = upstream.last_request.json["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == "output"
    assert set(sent["json_schema"]["schema"]["properties"]) == {"city", "sky"}
    events = await turn_events(stack, message.id)
    options = events["INTENT"]["payload"]["inputs"]["client_context"]["request_options"]
    assert options["response_format"] == sent
    assert events["EXECUTION"]["payload"]["output_check"]["valid"] is True
    await verified(stack, events["INTENT"]["thread_id"])
