"""The official ``openai`` SDK, unmodified except ``base_url`` and key, with no turngate header:
sync, async, streaming, ``parse()`` with a Pydantic model, a tool loop, SDK retries and the
fields that are refused. Each checks what the ledger recorded and that the thread verifies."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from tests.openai_compat.drop_in import (
    TEXT_ANSWER,
    TOOL_ANSWER,
    DropIn,
    assert_allowed,
    assert_verifies,
    client_context,
    drop_in_stack,
    ledger_length,
    recorded_turns,
)
from turngate.artifacts import open_artifact_store
from turngate.core.canonical import digest
from turngate.core.manifest import ArtifactPointer

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "GetWeather",  # a Pydantic-class name: CamelCase
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}


class Weather(BaseModel):
    city: str
    degrees: int


@pytest.fixture(scope="module")
async def drop_in(tmp_path_factory: pytest.TempPathFactory, temporal_server: Any) -> AsyncIterator[DropIn]:
    async for stack in drop_in_stack(tmp_path_factory.mktemp("openai-drop-in"), temporal_server):
        yield stack


@pytest.fixture(autouse=True)
def _fresh_upstream(drop_in: DropIn) -> None:
    drop_in.upstream.reset()


def client(drop_in: DropIn, **kw: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=drop_in.base_url, api_key=drop_in.key, **kw)


def sync_client(drop_in: DropIn, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=drop_in.base_url, api_key=drop_in.key, **kw)


async def test_sync_and_async_calls_are_one_turn_each(drop_in: DropIn) -> None:
    since = await ledger_length(drop_in)
    messages = [{"role": "user", "content": "hello"}]
    sync = await asyncio.to_thread(
        sync_client(drop_in).chat.completions.create, model="gpt-4o-mini", messages=messages
    )
    asynchronous = await client(drop_in).chat.completions.create(model="gpt-4o-mini", messages=messages)
    assert sync.choices[0].message.content == asynchronous.choices[0].message.content == TEXT_ANSWER
    turns = await recorded_turns(drop_in, since)
    # the same messages again, not as a retry: a second turn (and a second thread: stateless)
    assert [t.correlation_id for t in turns] == [sync.id, asynchronous.id] and sync.id != asynchronous.id
    for turn in turns:
        assert_allowed(turn)
        assert turn.execution["payload"]["output_text"] == TEXT_ANSWER
        await assert_verifies(drop_in, turn.thread_id)


async def test_streaming(drop_in: DropIn) -> None:
    since = await ledger_length(drop_in)
    stream = await client(drop_in).chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "stream please"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT_ANSWER
    assert chunks[-1].usage is not None
    (turn,) = await recorded_turns(drop_in, since)
    assert_allowed(turn)
    await assert_verifies(drop_in, turn.thread_id)


async def test_parse_with_a_pydantic_model(drop_in: DropIn) -> None:
    drop_in.upstream.structured = {"city": "Vilnius", "degrees": 21}
    since = await ledger_length(drop_in)
    completion = await client(drop_in).chat.completions.parse(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Weather in Vilnius as JSON"}],
        response_format=Weather,
    )
    assert completion.choices[0].message.parsed == Weather(city="Vilnius", degrees=21)
    sent = drop_in.upstream.last_request.json["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == "Weather"
    assert sent["json_schema"]["strict"] is True
    (turn,) = await recorded_turns(drop_in, since)
    # the schema is in the recorded request (INTENT, and so the DECISION's context digest) ...
    recorded = client_context(turn)["request_options"]["response_format"]
    assert recorded == sent
    # ... and the answer's check against it in the EXECUTION
    check = turn.execution["payload"]["output_check"]
    assert check["valid"] is True and check["format"] == "json_schema"
    assert turn.decision["payload"]["context_digest"]
    # the DECISION's context manifest names the options by digest
    pointer = ArtifactPointer.model_validate(turn.decision["payload"]["manifest"])
    store = open_artifact_store(drop_in.stack.settings.effective_artifacts)
    manifest = json.loads(await asyncio.to_thread(store.get, pointer))
    assert manifest["intent"]["request_options_digest"] == digest(client_context(turn)["request_options"])
    await assert_verifies(drop_in, turn.thread_id)


async def test_an_answer_that_breaks_the_schema_is_recorded_as_invalid(drop_in: DropIn) -> None:
    drop_in.upstream.structured = {"city": "Vilnius", "degrees": "warm"}
    raw = await client(drop_in).chat.completions.with_raw_response.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Weather as JSON, badly"}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "W", "schema": Weather.model_json_schema()},
        },
    )
    assert raw.headers["x-turngate-output-check"] == "invalid"
    completion = raw.parse()
    (turn,) = [t for t in await recorded_turns(drop_in) if t.correlation_id == completion.id]
    check = turn.execution["payload"]["output_check"]
    assert check["valid"] is False and "$.degrees: expected integer" in check["errors"][0]


async def test_a_stateless_tool_loop_continues_its_thread(drop_in: DropIn) -> None:
    drop_in.upstream.arguments = {"GetWeather": {"city": "Vilnius"}}
    since = await ledger_length(drop_in)
    sdk = client(drop_in)
    messages: list[Any] = [{"role": "user", "content": "Weather in Vilnius?\n"}]
    first = await sdk.chat.completions.create(
        model="gpt-4o-mini", messages=messages, tools=[WEATHER_TOOL], tool_choice="required"
    )
    call = first.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == ("GetWeather", {"city": "Vilnius"})
    sent = drop_in.upstream.last_request.json
    assert sent["tool_choice"] == "required" and sent["tools"][0]["function"]["strict"] is True
    messages += [first.choices[0].message, {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21"}]
    second = await sdk.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=[WEATHER_TOOL])
    assert second.choices[0].message.content == TOOL_ANSWER
    messages += [second.choices[0].message, {"role": "user", "content": "And tomorrow?"}]
    third = await sdk.chat.completions.create(model="gpt-4o-mini", messages=messages)
    turns = await recorded_turns(drop_in, since)
    assert [t.correlation_id for t in turns] == [first.id, second.id, third.id]
    # no header: the chain of messages found the thread each time
    assert {t.thread_id for t in turns} == {turns[0].thread_id}
    assert [len(t.intent["payload"]["declared_refs"]) for t in turns] == [0, 2, 4]
    assert client_context(turns[0])["request_options"]["tool_choice"] == {"mode": "required"}
    assert client_context(turns[0])["tools"][0]["strict"] is True
    for turn in turns:
        assert_allowed(turn)
    await assert_verifies(drop_in, turns[0].thread_id)


async def test_a_named_tool_choice_is_forwarded(drop_in: DropIn) -> None:
    note = {"type": "function", "function": {"name": "take-note", "parameters": {"type": "object"}}}
    completion = await client(drop_in).chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "note it"}],
        tools=[WEATHER_TOOL, note],
        tool_choice={"type": "function", "function": {"name": "take-note"}},
        parallel_tool_calls=False,
    )
    assert completion.choices[0].message.tool_calls[0].function.name == "take-note"
    sent = drop_in.upstream.last_request.json
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "take-note"}}
    assert sent["parallel_tool_calls"] is False


async def test_a_tool_call_that_breaks_the_schema_is_a_422_never_dropped(drop_in: DropIn) -> None:
    drop_in.upstream.arguments = {"GetWeather": {"town": "Vilnius"}}  # "city" is required
    since = await ledger_length(drop_in)
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        await client(drop_in).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Weather?"}], tools=[WEATHER_TOOL]
        )
    assert caught.value.code == "tool.invalid_arguments"
    assert "GetWeather" in caught.value.message
    (turn,) = await recorded_turns(drop_in, since)
    assert turn.execution["payload"]["tool_calls_rejected"][0]["reason_code"] == "tool.invalid_arguments"
    await assert_verifies(drop_in, turn.thread_id)


async def test_sampling_fields_are_forwarded_and_recorded(drop_in: DropIn) -> None:
    since = await ledger_length(drop_in)
    await client(drop_in).chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "sample"}],
        top_p=0.5,
        seed=42,
        stop="END",
        frequency_penalty=0.25,
        presence_penalty=-0.5,
        reasoning_effort="low",
        max_completion_tokens=33,
    )
    sent = drop_in.upstream.last_request.json
    expected = {
        "top_p": 0.5,
        "seed": 42,
        "stop": ["END"],
        "frequency_penalty": 0.25,
        "presence_penalty": -0.5,
        "reasoning_effort": "low",
        "max_completion_tokens": 33,
    }
    assert {k: sent.get(k) for k in expected} == expected and "max_tokens" not in sent
    (turn,) = await recorded_turns(drop_in, since)
    options = client_context(turn)["request_options"]
    assert options == {k: v for k, v in expected.items() if k != "max_completion_tokens"} | {
        "max_completion_tokens": True
    }
    assert turn.intent["payload"]["budget"] == {"max_tokens": 33}


@pytest.mark.parametrize(
    ("field", "value"),
    [("logprobs", True), ("n", 2), ("store", True), ("audio", {"voice": "x"}), ("service_tier", "flex")],
)
async def test_fields_that_cannot_be_honoured_are_refused(drop_in: DropIn, field: str, value: Any) -> None:
    since = await ledger_length(drop_in)
    with pytest.raises(openai.BadRequestError) as caught:
        await client(drop_in).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}], **{field: value}
        )
    assert caught.value.code == "openai.unsupported_parameter" and caught.value.param == field
    assert await ledger_length(drop_in) == since  # nothing recorded


async def test_an_sdk_retry_is_the_same_turn_and_no_second_provider_call(drop_in: DropIn) -> None:
    """The SDK retries a 429 after its Retry-After; the retry (x-stainless-retry-count 1) finds
    the recorded turn: one turn, and the upstream was called only by that turn's attempts."""
    drop_in.upstream.fail_next(400, message="bad upstream request")
    since = await ledger_length(drop_in)
    with pytest.raises(openai.BadRequestError) as caught:
        await client(drop_in, max_retries=2).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "retry me"}]
        )
    assert caught.value.code == "provider.bad_request"
    assert len(drop_in.upstream.requests) == 1  # a 4xx is never retried upstream
    drop_in.upstream.fail_next(429, retry_after="0", times=20)
    with pytest.raises(openai.RateLimitError) as limited:
        await client(drop_in, max_retries=1).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "retry me too"}]
        )
    assert limited.value.response.headers["retry-after"] == "1"
    upstream_calls = len(drop_in.upstream.requests)
    turns = await recorded_turns(drop_in, since)
    assert len(turns) == 2
    # the SDK was told not to retry a recorded failure (x-should-retry: false); a retry made
    # anyway names the same turn and calls nothing
    async with openai.AsyncOpenAI(base_url=drop_in.base_url, api_key=drop_in.key, max_retries=0) as sdk:
        with pytest.raises(openai.RateLimitError) as again:
            await sdk.chat.completions.create(
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": "retry me too"}],
                extra_headers={"x-stainless-retry-count": "1"},
            )
    assert again.value.response.headers["x-turngate-correlation-id"] == turns[1].correlation_id
    assert len(drop_in.upstream.requests) == upstream_calls
    assert len(await recorded_turns(drop_in, since)) == 2


async def test_a_deny_carries_its_reason_code(drop_in: DropIn) -> None:
    with pytest.raises(openai.PermissionDeniedError) as caught:
        await client(drop_in).chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "who are you?"}]
        )
    assert caught.value.code and caught.value.code.startswith("model.")
    assert caught.value.response.headers["x-turngate-reason-code"] == caught.value.code
    assert caught.value.response.headers["x-turngate-decision"] == "DENY"


async def test_concurrent_chats_stream_at_once_and_status_reports_the_limit(drop_in: DropIn) -> None:
    """The default LLM limit lets chats run together: four streams whose upstream takes 1 s
    each all finish in far less than the 4 s one-at-a-time would take."""
    drop_in.upstream.delay_s = 1.0
    sdk = client(drop_in)

    async def first_token(n: int) -> float:
        stream = await sdk.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": f"concurrent {n}"}], stream=True
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                return asyncio.get_running_loop().time()
        raise AssertionError("no token")

    started = asyncio.get_running_loop().time()
    firsts = await asyncio.gather(*(first_token(n) for n in range(4)))
    assert max(firsts) - started < 3.0, [round(t - started, 2) for t in firsts]
    llm = (await drop_in.stack.http.get("/status")).json()["job_runtime"]["llm"]
    assert llm["concurrency"] == 16
    assert (llm["worker_processes"], llm["effective_concurrency"]) == (1, 16)


async def test_a_streamed_tool_call_that_breaks_the_schema_ends_in_an_error_frame(drop_in: DropIn) -> None:
    drop_in.upstream.arguments = {"GetWeather": {"city": 7}}
    stream = await client(drop_in).chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Weather, streamed?"}],
        tools=[WEATHER_TOOL],
        stream=True,
    )
    with pytest.raises(openai.APIError) as caught:
        async for _chunk in stream:
            pass
    assert "tool.invalid_arguments" in str(caught.value.body) or "GetWeather" in caught.value.message
