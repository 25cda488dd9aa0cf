"""The official ``openai`` SDK, unmodified, against turngate's ``/v1`` endpoint.

A real Temporal dev server, the worker and the API in process; the provider is the offline echo
provider, or the fake OpenAI server of tests/fakes on 127.0.0.1 (tools, provider errors). What is
asserted is what the SDK returns or raises, and what the ledger recorded for the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.fakes import FakeOpenAIServer, fake_openai
from tests.security.conftest import make_key
from tests.stack import Stack, make_settings, running_stack
from turngate.settings import Settings

REPLY = "Hello from the fake server"
ROLES = "intent.write,snapshot.read"


@contextlib.asynccontextmanager
async def keyed_stack(settings: Settings, *, worker: bool = True) -> AsyncIterator[Stack]:
    """A stack with API keys on; ``stack.http`` (and the SDK clients below) use a tenant's key."""
    async with running_stack(settings.model_copy(update={"auth_mode": "keys"}), worker=worker) as stack:
        secret = await asyncio.to_thread(make_key, stack.settings, "acme", ROLES)
        stack.http.headers["Authorization"] = f"Bearer {secret}"
        yield stack


def _key(stack: Stack) -> str:
    return stack.http.headers["Authorization"].removeprefix("Bearer ")


def sdk(stack: Stack, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.http.base_url}/v1", api_key=_key(stack), max_retries=0, **kw)


def async_sdk(stack: Stack, **kw: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{stack.http.base_url}/v1", api_key=_key(stack), max_retries=0, **kw)


async def turn_events(stack: Stack, correlation_id: str) -> dict[str, dict[str, Any]]:
    snapshot = (await stack.http.get("/snapshot", params={"limit": 1000})).json()
    return {e["kind"]: e for e in snapshot["events"] if e["correlation_id"] == correlation_id}


@pytest.fixture
def openai_fake() -> Iterator[FakeOpenAIServer]:
    with fake_openai(REPLY) as server:
        yield server


def fake_settings(tmp_path: Path, temporal_server: Any, server: FakeOpenAIServer, **kw: Any) -> Any:
    return make_settings(
        tmp_path,
        temporal_server.address,
        openai_api_key="sk-test-openai-compat-0123456789",
        openai_base_url=server.base_url,
        default_provider="openai",
        **kw,
    )


async def test_sync_sdk_call_is_one_recorded_turn(settings) -> None:
    async with keyed_stack(settings) as stack:
        client = sdk(stack)
        raw = await asyncio.to_thread(
            client.chat.completions.with_raw_response.create,
            model="echo-1",
            messages=[{"role": "user", "content": "hello there"}],
        )
        completion = raw.parse()
        assert completion.object == "chat.completion"
        assert completion.choices[0].message.content == "echo: hello there"
        assert completion.choices[0].finish_reason == "stop"
        assert completion.model == "echo-1"
        assert completion.usage is not None and completion.usage.total_tokens >= 0
        # the response id is the correlation id; headers name the turn
        assert raw.headers["x-turngate-correlation-id"] == completion.id
        assert raw.headers["x-turngate-decision"] == "ALLOW"
        thread = raw.headers["x-turngate-thread"]
        events = await turn_events(stack, completion.id)
        assert set(events) == {"INTENT", "DECISION", "EXECUTION"}
        assert events["INTENT"]["thread_id"] == thread
        assert events["INTENT"]["payload"]["payload"]["message"] == "hello there"
        assert events["DECISION"]["payload"]["decision"] == "ALLOW"
        assert events["EXECUTION"]["payload"]["output_text"] == "echo: hello there"
        # the same ledger verifies
        report = (await stack.http.get("/verify", params={"thread_id": thread})).json()
        assert report["ok"] is True, report


async def test_async_sdk_and_models(settings) -> None:
    async with keyed_stack(settings) as stack:
        client = async_sdk(stack)
        models = await client.models.list()
        assert [m.id for m in models.data] == ["echo-1"]
        completion = await client.chat.completions.create(
            model="echo-1", messages=[{"role": "user", "content": "async hello"}]
        )
        assert completion.choices[0].message.content == "echo: async hello"


async def test_streaming_with_usage(settings) -> None:
    async with keyed_stack(settings.model_copy(update={"echo_delay_ms": 5})) as stack:
        client = async_sdk(stack)
        stream = await client.chat.completions.create(
            model="echo-1",
            messages=[{"role": "user", "content": "one two three four"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "echo: one two three four"
        assert all(c.object == "chat.completion.chunk" for c in chunks)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finishes == ["stop"]
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        events = await turn_events(stack, chunks[0].id)
        assert events["EXECUTION"]["payload"]["output_text"] == text


async def test_second_call_on_thread_resolves_history_as_refs(settings) -> None:
    async with keyed_stack(settings) as stack:
        client = async_sdk(stack, default_headers={"X-Turngate-Thread": "th-openai-1"})
        first = await client.chat.completions.create(
            model="echo-1", messages=[{"role": "user", "content": "What is two plus two?"}]
        )
        answer = first.choices[0].message.content
        second = await client.chat.completions.create(
            model="echo-1",
            messages=[
                {"role": "user", "content": "What is two plus two?"},
                {"role": "assistant", "content": answer},
                {"role": "user", "content": "Explain more"},
            ],
        )
        firsts, seconds = await turn_events(stack, first.id), await turn_events(stack, second.id)
        intent = seconds["INTENT"]
        assert intent["thread_id"] == "th-openai-1"
        assert intent["parent_turn_id"] == firsts["INTENT"]["turn_id"]
        # the first exchange became declared refs to its recorded events, not new text
        assert intent["payload"]["declared_refs"] == [
            {"ref_type": "event", "ref_id": firsts["INTENT"]["digest"]},
            {"ref_type": "event", "ref_id": firsts["EXECUTION"]["digest"]},
        ]
        assert "client_context" not in intent["payload"]["inputs"]
        resolved = seconds["DECISION"]["payload"]["resolved_refs"]
        assert [r["event_digest"] for r in resolved] == [
            firsts["INTENT"]["digest"],
            firsts["EXECUTION"]["digest"],
        ]


async def test_unmatched_history_on_a_named_thread_is_refused_by_default(settings) -> None:
    async with keyed_stack(settings) as stack:
        client = async_sdk(stack, default_headers={"X-Turngate-Thread": "th-unmatched"})
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="echo-1",
                messages=[
                    {"role": "user", "content": "never recorded"},
                    {"role": "assistant", "content": "nor this"},
                    {"role": "user", "content": "now"},
                ],
            )
        assert caught.value.code == "openai.unmatched_history"
        assert "messages [0, 1]" in caught.value.message
        snapshot = (await stack.http.get("/snapshot")).json()
        assert snapshot["length"] == 0  # nothing recorded


async def test_unmatched_history_and_system_recorded_as_client_context(
    tmp_path, temporal_server, openai_fake
) -> None:
    settings = fake_settings(tmp_path, temporal_server, openai_fake, openai_unmatched_history="record")
    async with keyed_stack(settings) as stack:
        client = async_sdk(stack)
        completion = await client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "from another tool"},
                {"role": "assistant", "content": "an answer we never saw"},
                {"role": "user", "content": "and now?"},
            ],
        )
        assert completion.choices[0].message.content == REPLY
        sent = openai_fake.last_request.json["messages"]
        assert [(m["role"], m["content"]) for m in sent] == [
            ("system", "Be brief."),
            ("user", "from another tool"),
            ("assistant", "an answer we never saw"),
            ("user", "and now?"),
        ]
        intent = (await turn_events(stack, completion.id))["INTENT"]
        context = intent["payload"]["inputs"]["client_context"]
        assert [m["source"] for m in context["messages"]] == [
            "system",
            "unmatched_history",
            "unmatched_history",
        ]
        decision = (await turn_events(stack, completion.id))["DECISION"]
        manifest_reasons = await _inclusion_reasons(stack, decision)
        assert manifest_reasons[:3] == [
            "client_system",
            "client_unmatched_history",
            "client_unmatched_history",
        ]


async def _inclusion_reasons(stack: Stack, decision: dict[str, Any]) -> list[str]:
    from turngate.artifacts import open_artifact_store
    from turngate.core.manifest import ArtifactPointer

    pointer = ArtifactPointer.model_validate(decision["payload"]["manifest"])
    manifest = json.loads(open_artifact_store(stack.settings.effective_artifacts).get(pointer))
    return [entry["included_reason"] for entry in manifest["inclusion_log"]]


async def test_deny_is_an_openai_error_with_the_reason_code(tmp_path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address, policy_module="turngate.policies.deny_all")
    async with keyed_stack(settings) as stack:
        with pytest.raises(openai.PermissionDeniedError) as caught:
            await async_sdk(stack).chat.completions.create(
                model="echo-1", messages=[{"role": "user", "content": "may I?"}]
            )
        error = caught.value
        assert error.status_code == 403
        assert error.code == "policy.deny_all" or error.code.startswith("policy.")
        assert error.type == "permission_error"
        assert error.response.headers["x-turngate-decision"] == "DENY"
        cid = error.response.headers["x-turngate-correlation-id"]
        events = await turn_events(stack, cid)
        assert set(events) == {"INTENT", "DECISION"}
        assert events["DECISION"]["payload"]["reason_codes"] == [error.code]


async def test_unknown_model_is_denied(settings) -> None:
    async with keyed_stack(settings) as stack:
        with pytest.raises(openai.PermissionDeniedError) as caught:
            await async_sdk(stack).chat.completions.create(
                model="no-such-model", messages=[{"role": "user", "content": "hi"}]
            )
        assert caught.value.code == "model.unavailable"


async def test_idempotency_key_returns_the_recorded_turn(settings) -> None:
    async with keyed_stack(settings) as stack:
        client = async_sdk(stack)
        args: dict[str, Any] = {"model": "echo-1", "messages": [{"role": "user", "content": "once"}]}
        first = await client.chat.completions.create(**args, extra_headers={"Idempotency-Key": "k-1"})
        again = await client.chat.completions.create(**args, extra_headers={"Idempotency-Key": "k-1"})
        other = await client.chat.completions.create(**args, metadata={"idempotency_key": "k-2"})
        assert first.id == again.id != other.id
        snapshot = (await stack.http.get("/snapshot")).json()
        intents = [e for e in snapshot["events"] if e["kind"] == "INTENT"]
        assert len(intents) == 2  # the retry ran nothing again


async def test_tools_round_trip(tmp_path, temporal_server, openai_fake) -> None:
    openai_fake.tool_calls = [{"id": "call_1", "name": "get_weather", "arguments": {"city": "Vilnius"}}]
    async with keyed_stack(fake_settings(tmp_path, temporal_server, openai_fake)) as stack:
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather for a city",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                },
            }
        ]
        client = async_sdk(stack)
        completion = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Weather?"}], tools=tools
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "tool_calls"
        call = choice.message.tool_calls[0]
        assert call.id == "call_1" and call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": "Vilnius"}
        assert [t["function"]["name"] for t in openai_fake.received_tools or []] == ["get_weather"]
        # streamed: the same call arrives as a tool_calls delta
        stream = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Weather?"}], tools=tools, stream=True
        )
        chunks = [chunk async for chunk in stream]
        deltas = [
            c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls
        ]
        assert deltas[0][0].function.name == "get_weather"
        assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("status", "error", "code", "retry_after"),
    [
        (429, openai.RateLimitError, "provider.rate_limited", "1"),
        (503, openai.InternalServerError, "provider.overloaded", "1"),
        (500, openai.InternalServerError, "provider.server_error", None),
        (400, openai.BadRequestError, "provider.bad_request", None),
        (404, openai.NotFoundError, "provider.not_found", None),
        (422, openai.UnprocessableEntityError, "provider.unprocessable", None),
    ],
)
async def test_provider_errors_map_to_sdk_statuses(
    tmp_path,
    temporal_server,
    openai_fake,
    status: int,
    error: type[Exception],
    code: str,
    retry_after: str | None,
) -> None:
    openai_fake.fail_next(status, retry_after="0", times=5)
    async with keyed_stack(fake_settings(tmp_path, temporal_server, openai_fake)) as stack:
        with pytest.raises(error) as caught:
            await async_sdk(stack).chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
            )
        assert caught.value.status_code == (502 if status == 500 else status)
        assert caught.value.code == code
        assert caught.value.response.headers["x-turngate-reason-code"] == code
        assert caught.value.response.headers.get("retry-after") == retry_after
        cid = caught.value.response.headers["x-turngate-correlation-id"]
        recorded = (await turn_events(stack, cid))["EXECUTION"]["payload"]["error"]
        assert recorded["code"] == code


async def test_provider_timeout_is_503_with_retry_after(tmp_path, temporal_server, openai_fake) -> None:
    openai_fake.delay_s = 10.0
    settings = fake_settings(tmp_path, temporal_server, openai_fake, llm_wall_clock_s=1)
    async with keyed_stack(settings) as stack:
        with pytest.raises(openai.InternalServerError) as caught:
            await async_sdk(stack).chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "slow"}]
            )
        assert caught.value.status_code == 503 and caught.value.code == "llm.timeout"
        assert caught.value.response.headers["retry-after"] == "1"


async def test_streamed_deny_is_a_403_before_any_frame(tmp_path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address, policy_module="turngate.policies.deny_all")
    async with keyed_stack(settings) as stack:
        client = sdk(stack)

        def stream_it() -> list[Any]:
            return list(
                client.chat.completions.create(
                    model="echo-1", messages=[{"role": "user", "content": "may I?"}], stream=True
                )
            )

        with pytest.raises(openai.PermissionDeniedError) as caught:
            await asyncio.to_thread(stream_it)
        assert caught.value.code.startswith("policy.")


async def test_sync_streaming(settings) -> None:
    async with keyed_stack(settings) as stack:
        client = sdk(stack)

        def stream_it() -> str:
            with client.chat.completions.stream(
                model="echo-1", messages=[{"role": "user", "content": "sync stream"}]
            ) as stream:
                return stream.get_final_completion().choices[0].message.content or ""

        assert await asyncio.to_thread(stream_it) == "echo: sync stream"


async def test_malformed_client_context_from_the_native_api_is_denied(settings) -> None:
    async with keyed_stack(settings) as stack:
        bad = {"client_context": {"messages": [{"role": "tool", "content": "x", "source": "system"}]}}
        response = await stack.chat("hi", correlation_id="c-bad-context", inputs=bad)
        assert response.status_code == 202, response.text
        decision = response.json()["decision"]["payload"]
        assert decision["decision"] == "DENY"
        assert decision["reason_codes"] == ["intent.invalid_client_context"]


PACK = Path(__file__).resolve().parents[2] / "examples" / "trickster" / "prompts"


async def test_prompt_pack_system_prompt_comes_first_then_the_clients(
    tmp_path, temporal_server, openai_fake
) -> None:
    settings = fake_settings(tmp_path, temporal_server, openai_fake, prompts_dir=PACK)
    async with keyed_stack(settings) as stack:
        completion = await async_sdk(stack).chat.completions.create(
            model="gpt-4o-mini",
            messages=[
                {"role": "system", "content": "Answer in one word."},
                {"role": "user", "content": "Labas"},
            ],
        )
        sent = openai_fake.last_request.json["messages"]
        assert [m["role"] for m in sent] == ["system", "system", "user"]
        decision = (await turn_events(stack, completion.id))["DECISION"]["payload"]
        # the pack's pinned prompt is what reached the model first; the client's follows it
        assert (
            hashlib.sha256(sent[0]["content"].encode()).hexdigest()
            in decision["prompt"]["system_prompt_sha256"]
        )
        assert sent[1]["content"] == "Answer in one word." and sent[2]["content"] == "Labas"


async def test_client_system_messages_refused_when_configured(settings) -> None:
    async with keyed_stack(settings.model_copy(update={"openai_client_system": "refuse"})) as stack:
        with pytest.raises(openai.BadRequestError) as caught:
            await async_sdk(stack).chat.completions.create(
                model="echo-1",
                messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
            )
        assert caught.value.code == "openai.system_message_refused"


async def test_message_size_limit_at_and_over_the_boundary_in_bytes(settings) -> None:
    limit = 64
    async with keyed_stack(settings.model_copy(update={"max_message_bytes": limit})) as stack:
        client = async_sdk(stack)
        at_limit = "ą" * (limit // 2)  # 2 bytes each: exactly the limit, half as many characters
        ok = await client.chat.completions.create(
            model="echo-1", messages=[{"role": "user", "content": at_limit}]
        )
        assert ok.choices[0].message.content == f"echo: {at_limit}"
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(
                model="echo-1", messages=[{"role": "user", "content": at_limit + "a"}]
            )
        assert caught.value.status_code == 413 and caught.value.code == "admission.payload_too_large"
        intents = [e for e in (await stack.http.get("/snapshot")).json()["events"] if e["kind"] == "INTENT"]
        assert len(intents) == 1  # the refused call recorded nothing


async def test_a_retried_stream_after_text_ends_with_an_error_frame(
    tmp_path, temporal_server, openai_fake
) -> None:
    openai_fake.error_mid_stream_next("overloaded_error")
    async with keyed_stack(fake_settings(tmp_path, temporal_server, openai_fake)) as stack:
        stream = await async_sdk(stack).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        received: list[str] = []
        with pytest.raises(openai.APIError) as caught:
            async for chunk in stream:
                received += [chunk.choices[0].delta.content or ""] if chunk.choices else []
        assert "".join(received)  # text had been sent before the retry
        assert "retried" in caught.value.message
        cid = stream.response.headers["x-turngate-correlation-id"]
        # the ledger holds the answer of the attempt that succeeded (the retry may still be running)
        for _ in range(600):
            events = await turn_events(stack, cid)
            if "EXECUTION" in events:
                break
            await asyncio.sleep(0.1)
        execution = events["EXECUTION"]["payload"]
        assert execution["output_text"] == REPLY and len(openai_fake.requests) == 2
