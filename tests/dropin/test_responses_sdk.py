"""The official ``openai`` SDK's Responses API, unmodified but for base_url and key, against
``/v1/responses``: text, streaming, tools, ``previous_response_id``, structured output, errors.

One stack per module (a real Temporal dev server, the worker and the API in process); the
provider is a fake OpenAI server on 127.0.0.1 that streams and calls a tool until it is given
the result. Each test checks what the ledger recorded and that the thread verifies.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
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
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def client(stack: Stack, **kw: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{stack.http.base_url}/v1", api_key=api_key(stack), max_retries=0, **kw
    )


async def test_text_is_one_recorded_turn(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    sync = openai.OpenAI(base_url=f"{stack.http.base_url}/v1", api_key=api_key(stack), max_retries=0)
    raw = await asyncio.to_thread(
        sync.responses.with_raw_response.create,
        model="gpt-4o-mini",
        input="Say hello",
        instructions="Be brief.",
        max_output_tokens=50,
    )
    response = raw.parse()
    assert response.object == "response" and response.status == "completed"
    assert response.output_text == REPLY
    assert response.id.startswith("resp_") and response.output[0].id.startswith("msg_")
    assert response.usage is not None and response.usage.output_tokens == len(REPLY.split())
    assert raw.headers["x-turngate-correlation-id"] == response.id
    assert raw.headers["x-turngate-decision"] == "ALLOW"
    events = await turn_events(stack, response.id)
    assert set(events) == {"INTENT", "DECISION", "EXECUTION"}
    intent = events["INTENT"]["payload"]
    assert intent["payload"]["message"] == "Say hello"
    assert intent["budget"] == {"max_tokens": 50}
    context = intent["inputs"]["client_context"]
    assert context["source"] == "openai.responses"
    assert context["messages"] == [{"role": "system", "content": "Be brief.", "source": "system"}]
    assert events["EXECUTION"]["payload"]["output_text"] == REPLY
    sent = upstream.last_request.json
    assert sent["messages"][-1] == {"role": "user", "content": "Say hello"}
    await verified(stack, events["INTENT"]["thread_id"])


async def test_streamed_events_and_final_response(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    async with client(stack).responses.stream(model="gpt-4o-mini", input="Stream it") as stream:
        kinds = []
        deltas = []
        async for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = await stream.get_final_response()
    assert "".join(deltas) == REPLY == final.output_text
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    events = await turn_events(stack, final.id)
    assert events["EXECUTION"]["payload"]["output_text"] == REPLY
    await verified(stack, events["INTENT"]["thread_id"])


async def test_a_tool_loop_continued_by_previous_response_id(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    upstream.loop_calls = [WEATHER_CALL]
    sdk = client(stack)
    first = await sdk.responses.create(model="gpt-4o-mini", input="Weather in Vilnius?", tools=[WEATHER_TOOL])
    calls = [item for item in first.output if item.type == "function_call"]
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_w1", "get_weather", {"city": "Vilnius"})
    ]
    second = await sdk.responses.create(
        model="gpt-4o-mini",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": "call_w1", "output": "sunny, 21 C"}],
        tools=[WEATHER_TOOL],
    )
    assert second.output_text == REPLY and second.previous_response_id == first.id
    # the provider got the whole loop in its own shape
    sent = upstream.last_request.json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[-1] == {"role": "tool", "content": "sunny, 21 C", "tool_call_id": "call_w1"}
    # the ledger: one thread; the second turn declares the first one's events and records the result
    firsts, seconds = await turn_events(stack, first.id), await turn_events(stack, second.id)
    assert seconds["INTENT"]["thread_id"] == firsts["INTENT"]["thread_id"]
    intent = seconds["INTENT"]["payload"]
    assert [r["ref_id"] for r in intent["declared_refs"]] == [
        firsts["INTENT"]["digest"],
        firsts["EXECUTION"]["digest"],
    ]
    assert seconds["INTENT"]["parent_turn_id"] == firsts["INTENT"]["turn_id"]
    assert seconds["DECISION"]["payload"]["decision"] == "ALLOW"
    assert intent["inputs"]["client_context"]["tool_results"] == [
        {"tool_call_id": "call_w1", "content": "sunny, 21 C"}
    ]
    # a third turn after that carries the whole history
    third = await sdk.responses.create(model="gpt-4o-mini", previous_response_id=second.id, input="Thanks!")
    thirds = await turn_events(stack, third.id)
    assert len(thirds["INTENT"]["payload"]["declared_refs"]) == 4
    assert [m["role"] for m in upstream.last_request.json["messages"]][-2:] == ["assistant", "user"]
    await verified(stack, firsts["INTENT"]["thread_id"])


async def test_resent_output_items_continue_the_thread(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    """A stateless client (no previous_response_id, no header) resends the output items: their
    ids name the turn, so the call continues its thread and the items become declared refs."""
    upstream.loop_calls = [WEATHER_CALL]
    sdk = client(stack)
    question = {"role": "user", "content": "Weather in Vilnius?"}
    first = await sdk.responses.create(model="gpt-4o-mini", input=[question], tools=[WEATHER_TOOL])
    resent = [item.model_dump(exclude_none=True) for item in first.output]
    result = {"type": "function_call_output", "call_id": "call_w1", "output": "rainy"}
    second = await sdk.responses.create(
        model="gpt-4o-mini", input=[question, *resent, result], tools=[WEATHER_TOOL]
    )
    assert second.output_text == REPLY
    firsts, seconds = await turn_events(stack, first.id), await turn_events(stack, second.id)
    assert seconds["INTENT"]["thread_id"] == firsts["INTENT"]["thread_id"]
    assert [r["ref_id"] for r in seconds["INTENT"]["payload"]["declared_refs"]] == [
        firsts["INTENT"]["digest"],
        firsts["EXECUTION"]["digest"],
    ]
    assert (
        "messages" not in seconds["INTENT"]["payload"]["inputs"]["client_context"]
        or not (seconds["INTENT"]["payload"]["inputs"]["client_context"]["messages"])
    )
    await verified(stack, firsts["INTENT"]["thread_id"])


async def test_streamed_tool_calls(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    upstream.loop_calls = [WEATHER_CALL]
    upstream.reply = ""
    async with client(stack).responses.stream(
        model="gpt-4o-mini", input="Weather?", tools=[WEATHER_TOOL]
    ) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert "response.output_text.delta" not in kinds
    assert "response.function_call_arguments.done" in kinds and kinds[-1] == "response.completed"
    assert [(item.type, item.call_id) for item in final.output] == [("function_call", "call_w1")]
    events = await turn_events(stack, final.id)
    assert events["EXECUTION"]["payload"]["tool_calls"][0]["name"] == "get_weather"
    await verified(stack, events["INTENT"]["thread_id"])


class Weather(BaseModel):
    city: str
    sky: str


async def test_structured_output_parses(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    upstream.reply = json.dumps({"city": "Vilnius", "sky": "clear"})
    parsed = await client(stack).responses.parse(model="gpt-4o-mini", input="Weather?", text_format=Weather)
    assert parsed.output_parsed == Weather(city="Vilnius", sky="clear")
    assert parsed.text.format is not None and parsed.text.format.type == "json_schema"
    # the format reaches the provider, is recorded, and the answer is checked against it
    sent = upstream.last_request.json["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == "Weather"
    assert set(sent["json_schema"]["schema"]["properties"]) == {"city", "sky"}
    events = await turn_events(stack, parsed.id)
    options = events["INTENT"]["payload"]["inputs"]["client_context"]["request_options"]
    assert options["response_format"] == sent
    assert events["EXECUTION"]["payload"]["output_check"]["valid"] is True
    await verified(stack, events["INTENT"]["thread_id"])


async def test_forced_tool_choice_and_sampling_reach_the_provider(
    stack: Stack, upstream: ToolLoopOpenAI
) -> None:
    upstream.loop_calls = [WEATHER_CALL]
    response = await client(stack).responses.create(
        model="gpt-4o-mini",
        input="Vilnius, please",
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
        top_p=0.5,
    )
    assert [item.type for item in response.output] == ["message", "function_call"]
    sent = upstream.last_request.json
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent["parallel_tool_calls"] is False and sent["top_p"] == 0.5
    events = await turn_events(stack, response.id)
    options = events["INTENT"]["payload"]["inputs"]["client_context"]["request_options"]
    assert options == {
        "tool_choice": {"mode": "function", "name": "get_weather"},
        "parallel_tool_calls": False,
        "top_p": 0.5,
    }
    await verified(stack, events["INTENT"]["thread_id"])


async def test_a_retry_is_the_first_attempts_turn(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    """The SDK's retry (``x-stainless-retry-count`` above 0) answers the recorded turn; the same
    input sent again, not as a retry, is a new turn."""
    body = {"model": "gpt-4o-mini", "input": "Once?"}
    auth = {"Authorization": f"Bearer {api_key(stack)}"}
    async with httpx.AsyncClient(base_url=str(stack.http.base_url), timeout=30) as http:
        first = await http.post("/v1/responses", json=body, headers=auth | {"x-stainless-retry-count": "0"})
        retry = await http.post("/v1/responses", json=body, headers=auth | {"x-stainless-retry-count": "1"})
        again = await http.post("/v1/responses", json=body, headers=auth)
    assert first.status_code == retry.status_code == again.status_code == 200
    assert retry.json()["id"] == first.json()["id"] != again.json()["id"]
    assert len(upstream.requests) == 2  # the retry called no provider


@pytest.mark.parametrize(
    ("args", "code", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "responses.unsupported_tool", "tools[0]"),
        ({"previous_response_id": "resp_" + "0" * 32}, "responses.previous_response_not_found", None),
        ({"store": False}, "responses.unsupported_parameter", "store"),
        ({"background": True}, "responses.unsupported_parameter", "background"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "responses.unsupported_input", "input[0]"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "responses.unsupported_content",
            "input[0].content[0]",
        ),
        ({"tool_choice": {"type": "web_search_preview"}}, "responses.unsupported_parameter", "tool_choice"),
        # the shared checks name the request's own fields
        (
            {"instructions": "x", "input": [{"role": "assistant", "content": "Hi"}]},
            "openai.last_message_not_user",
            "input[0]",
        ),
    ],
)
async def test_what_cannot_be_honoured_is_a_400(
    stack: Stack, upstream: ToolLoopOpenAI, args: dict[str, Any], code: str, param: str | None
) -> None:
    body: dict[str, Any] = {"model": "gpt-4o-mini", "input": "hi"} | args
    with pytest.raises(openai.BadRequestError) as caught:
        await client(stack).responses.create(**body)
    assert caught.value.code == code
    if param is not None:
        assert caught.value.param == param
    assert upstream.requests == []


async def test_deny_is_a_403_with_the_reason_code(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    with pytest.raises(openai.PermissionDeniedError) as caught:
        await client(stack).responses.create(model="no-such-model", input="hi")
    assert caught.value.code == "model.unavailable"
    headers = caught.value.response.headers
    assert headers["x-turngate-decision"] == "DENY" and headers["x-should-retry"] == "false"
    events = await turn_events(stack, headers["x-turngate-correlation-id"])
    assert set(events) == {"INTENT", "DECISION"}
    assert upstream.requests == []


async def test_resent_messages_continue_a_text_conversation(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    """What openai-agents' ``to_input_list()`` sends for a next turn: the question, the output
    items, the new question; the message item's id names the thread."""
    sdk = client(stack)
    first = await sdk.responses.create(model="gpt-4o-mini", input="What is two plus two?")
    resent = [item.model_dump(exclude_none=True) for item in first.output]
    second = await sdk.responses.create(
        model="gpt-4o-mini",
        input=[
            {"role": "user", "content": "What is two plus two?"},
            *resent,
            {"role": "user", "content": "Why?"},
        ],
    )
    firsts, seconds = await turn_events(stack, first.id), await turn_events(stack, second.id)
    assert seconds["INTENT"]["thread_id"] == firsts["INTENT"]["thread_id"]
    assert len(seconds["INTENT"]["payload"]["declared_refs"]) == 2
    assert [m["role"] for m in upstream.last_request.json["messages"]] == ["user", "assistant", "user"]
    await verified(stack, firsts["INTENT"]["thread_id"])


async def test_a_conversation_resent_as_messages_continues_its_thread(
    stack: Stack, upstream: ToolLoopOpenAI
) -> None:
    """Resent as plain messages (no ids of ours): the chat path's stateless rule finds the call
    that got the answer, by the ``resp_`` id derived from its messages."""
    sdk = client(stack)
    first = await sdk.responses.create(model="gpt-4o-mini", input="What is five plus five?")
    second = await sdk.responses.create(
        model="gpt-4o-mini",
        input=[
            {"role": "user", "content": "What is five plus five?"},
            {"role": "assistant", "content": first.output_text},
            {"role": "user", "content": "Why?"},
        ],
    )
    firsts, seconds = await turn_events(stack, first.id), await turn_events(stack, second.id)
    assert seconds["INTENT"]["thread_id"] == firsts["INTENT"]["thread_id"]
    assert seconds["INTENT"]["parent_turn_id"] == first.id
    assert len(seconds["INTENT"]["payload"]["declared_refs"]) == 2
    await verified(stack, firsts["INTENT"]["thread_id"])


async def test_a_provider_rate_limit_is_a_429(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    upstream.fail_next(429, retry_after="0", times=5)
    with pytest.raises(openai.RateLimitError) as caught:
        await client(stack).responses.create(model="gpt-4o-mini", input="hi")
    assert caught.value.code == "provider.rate_limited"
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.response.headers["x-should-retry"] == "false"
    cid = caught.value.response.headers["x-turngate-correlation-id"]
    assert (await turn_events(stack, cid))["EXECUTION"]["payload"]["error"]["code"] == "provider.rate_limited"


async def test_a_stream_retried_after_text_ends_failed(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    upstream.error_mid_stream_next("overloaded_error")
    stream = await client(stack).responses.create(model="gpt-4o-mini", input="hi", stream=True)
    events = [event async for event in stream]
    assert any(event.type == "response.output_text.delta" for event in events)
    last = events[-1]
    assert last.type == "response.failed"
    assert last.response.error is not None and last.response.error.code == "stream.reset"  # type: ignore[comparison-overlap]
    events_recorded = await settled(stack, stream.response.headers["x-turngate-correlation-id"])
    assert events_recorded["EXECUTION"]["payload"]["output_text"] == REPLY  # the retry's answer


async def test_structured_output_streams_and_parses(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    upstream.reply = json.dumps({"city": "Riga", "sky": "grey"})
    async with client(stack).responses.stream(
        model="gpt-4o-mini", input="Weather?", text_format=Weather
    ) as stream:
        final = await stream.get_final_response()
    assert final.output_parsed == Weather(city="Riga", sky="grey")
    events = await turn_events(stack, final.id)
    assert json.loads(events["EXECUTION"]["payload"]["output_text"]) == {"city": "Riga", "sky": "grey"}
    assert upstream.last_request.json["response_format"]["type"] == "json_schema"
    assert events["EXECUTION"]["payload"]["output_check"]["valid"] is True
    await verified(stack, events["INTENT"]["thread_id"])
