"""A turn held for human review, and tool calls the gateway refused, through ``/v1/responses``
and ``/v1/messages`` with the official ``openai`` and ``anthropic`` SDKs, unmodified but for
base_url, key and an ``Idempotency-Key`` header.

As on ``/v1/chat/completions``: a turn still waiting for a reviewer after
``TURNGATE_WAIT_TIMEOUT_S`` answers 423 ``review.pending`` (streamed or not), the same call again
answers the turn's result once it is approved; a tool call that breaks the offered schema answers
422 with the rejection's code (a stream ends with the API's error event). Each checks that the
ledger holds the whole turn (the review verdict, the refused call) and that the thread verifies.

One stack for the module (a real Temporal dev server, the worker and the API in process) whose
policy sends "refund" to review; the provider is a fake OpenAI server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from tests.dropin.conftest import (
    REPLY,
    ToolLoopOpenAI,
    api_key,
    dropin_stack,
    settled,
    turn_events,
    verified,
)
from tests.security.conftest import bearer, make_key
from tests.stack import Stack

#: The model calls the tool without its required argument.
BAD_CALL = {"id": "call_bad1", "name": "get_weather", "arguments": {"town": "Vilnius"}}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
RESPONSES_TOOL = {"type": "function", "name": "get_weather", "description": "Weather", "parameters": SCHEMA}
MESSAGES_TOOL = {"name": "get_weather", "description": "Weather", "input_schema": SCHEMA}


@pytest.fixture(scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory, temporal_server: Any, openai_upstream: ToolLoopOpenAI
) -> AsyncIterator[Stack]:
    tmp = tmp_path_factory.mktemp("dropin-review")
    review = {"policy_module": "tests.reviews.policies", "policy_object": "REVIEW", "wait_timeout_s": 1.0}
    async with dropin_stack(tmp, temporal_server, openai_upstream, **review) as running:
        yield running


def openai_client(stack: Stack, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{stack.http.base_url}/v1",
        api_key=api_key(stack),
        max_retries=0,
        default_headers={"Idempotency-Key": key},
    )


def anthropic_client(stack: Stack, key: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=str(stack.http.base_url),
        api_key=api_key(stack),
        max_retries=0,
        default_headers={"Idempotency-Key": key},
    )


async def approve(stack: Stack, correlation_id: str) -> None:
    reviewer = await asyncio.to_thread(make_key, stack.settings, "acme", "review")
    approved = await stack.http.post(f"/reviews/{correlation_id}/approve", json={}, headers=bearer(reviewer))
    assert approved.status_code == 200, approved.text


async def assert_reviewed_and_answered(stack: Stack, correlation_id: str) -> None:
    """The ledger holds the whole turn: the approved review in its DECISION, the answer."""
    events = await settled(stack, correlation_id)
    decision = events["DECISION"]["payload"]
    assert decision["decision"] == "ALLOW" and decision["review"]["verdict"] == "approve"
    assert events["EXECUTION"]["payload"]["output_text"] == REPLY
    await verified(stack, events["INTENT"]["thread_id"])


async def assert_call_refused(stack: Stack, correlation_id: str) -> None:
    """The refused call is recorded in the EXECUTION, not dropped; nothing was forwarded."""
    events = await settled(stack, correlation_id)
    execution = events["EXECUTION"]["payload"]
    (rejected,) = execution["tool_calls_rejected"]
    assert (rejected["name"], rejected["reason_code"]) == ("get_weather", "tool.invalid_arguments")
    assert not execution.get("tool_calls")
    await verified(stack, events["INTENT"]["thread_id"])


async def test_responses_review_pending_is_a_423_then_the_answer(
    stack: Stack, upstream: ToolLoopOpenAI
) -> None:
    client = openai_client(stack, "resp-review-1")
    with pytest.raises(openai.APIStatusError) as caught:
        await client.responses.create(model="gpt-4o-mini", input="refund order 7")
    assert type(caught.value) is openai.APIStatusError  # 423 has no class of its own
    assert (caught.value.status_code, caught.value.code) == (423, "review.pending")
    cid = caught.value.response.headers["x-turngate-correlation-id"]
    assert cid.startswith("resp_") and cid in caught.value.message
    with pytest.raises(openai.APIStatusError) as streamed:  # still waiting: before any event
        async with client.responses.stream(model="gpt-4o-mini", input="refund order 7") as stream:
            await stream.get_final_response()
    assert (streamed.value.status_code, streamed.value.code) == (423, "review.pending")
    assert streamed.value.response.headers["x-turngate-correlation-id"] == cid
    assert "DECISION" not in await turn_events(stack, cid)
    await approve(stack, cid)
    answered = await client.responses.create(model="gpt-4o-mini", input="refund order 7")
    assert answered.id == cid and answered.output_text == REPLY
    await assert_reviewed_and_answered(stack, cid)


async def test_messages_review_pending_is_a_423_then_the_streamed_answer(
    stack: Stack, upstream: ToolLoopOpenAI
) -> None:
    client = anthropic_client(stack, "msg-review-1")
    body: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "refund order 8"}],
    }
    with pytest.raises(anthropic.APIStatusError) as caught:
        await client.messages.create(**body)
    assert type(caught.value) is anthropic.APIStatusError and caught.value.status_code == 423
    error = caught.value.body  # type: ignore[assignment]
    assert error["type"] == "error"  # type: ignore[index]
    assert error["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert error["error"]["code"] == "review.pending"  # type: ignore[index]
    cid = caught.value.response.headers["x-turngate-correlation-id"]
    assert cid.startswith("msg_") and cid in error["error"]["message"]  # type: ignore[index]
    with pytest.raises(anthropic.APIStatusError) as streamed:  # still waiting: before any event
        async with client.messages.stream(**body) as stream:
            await stream.get_final_message()
    assert streamed.value.status_code == 423
    assert streamed.value.body["error"]["code"] == "review.pending"  # type: ignore[index]
    await approve(stack, cid)
    async with client.messages.stream(**body) as stream:
        texts = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert final.id == cid and "".join(texts) == REPLY
    await assert_reviewed_and_answered(stack, cid)


async def test_responses_refused_tool_call_is_a_422(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    upstream.loop_calls = [BAD_CALL]
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        await openai_client(stack, "resp-bad-call-1").responses.create(
            model="gpt-4o-mini", input="Weather?", tools=[RESPONSES_TOOL]
        )
    assert caught.value.status_code == 422 and caught.value.code == "tool.invalid_arguments"
    assert "get_weather" in caught.value.message
    headers = caught.value.response.headers
    assert (
        headers["x-should-retry"] == "false" and headers["x-turngate-reason-code"] == "tool.invalid_arguments"
    )
    await assert_call_refused(stack, headers["x-turngate-correlation-id"])


async def test_responses_streamed_refused_tool_call_ends_with_an_error_event(
    stack: Stack, upstream: ToolLoopOpenAI
) -> None:
    upstream.loop_calls = [BAD_CALL]
    stream = await openai_client(stack, "resp-bad-call-2").responses.create(
        model="gpt-4o-mini", input="Weather?", tools=[RESPONSES_TOOL], stream=True
    )
    events = [event async for event in stream]
    kinds = [event.type for event in events]
    assert kinds[-2:] == ["error", "response.failed"] and "response.completed" not in kinds
    error, failed = events[-2], events[-1]
    assert error.code == "tool.invalid_arguments" and "get_weather" in error.message  # type: ignore[union-attr]
    assert failed.response.error.code == "tool.invalid_arguments"  # type: ignore[union-attr]
    assert not any(
        event.type == "response.output_item.added" and event.item.type == "function_call" for event in events
    )  # type: ignore[union-attr]
    await assert_call_refused(stack, stream.response.headers["x-turngate-correlation-id"])


async def test_messages_refused_tool_call_is_a_422(stack: Stack, upstream: ToolLoopOpenAI) -> None:
    upstream.loop_calls = [BAD_CALL]
    with pytest.raises(anthropic.UnprocessableEntityError) as caught:
        await anthropic_client(stack, "msg-bad-call-1").messages.create(
            model="gpt-4o-mini",
            max_tokens=64,
            messages=[{"role": "user", "content": "Weather?"}],
            tools=[MESSAGES_TOOL],
        )
    assert caught.value.status_code == 422
    error = caught.value.body["error"]  # type: ignore[index]
    assert (error["type"], error["code"]) == ("invalid_request_error", "tool.invalid_arguments")
    assert "get_weather" in error["message"]
    assert caught.value.response.headers["x-should-retry"] == "false"
    await assert_call_refused(stack, caught.value.response.headers["x-turngate-correlation-id"])


async def test_messages_streamed_refused_tool_call_ends_with_an_error_event(
    stack: Stack, upstream: ToolLoopOpenAI
) -> None:
    upstream.loop_calls = [BAD_CALL]
    kinds: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as caught:
        async with anthropic_client(stack, "msg-bad-call-2").messages.stream(
            model="gpt-4o-mini",
            max_tokens=64,
            messages=[{"role": "user", "content": "Weather?"}],
            tools=[MESSAGES_TOOL],
        ) as stream:
            async for event in stream:
                kinds.append(event.type)
    assert kinds[0] == "message_start" and "message_stop" not in kinds
    error = caught.value.body  # type: ignore[assignment]
    assert error["type"] == "error"  # type: ignore[index]
    assert error["error"]["code"] == "tool.invalid_arguments"  # type: ignore[index]
    assert error["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    await assert_call_refused(stack, caught.value.response.headers["x-turngate-correlation-id"])
