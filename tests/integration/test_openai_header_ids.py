"""Thread ids in any script round-trip through ``/v1/chat/completions`` headers.

Header values are Latin-1 on the wire: a CJK or emoji ``metadata.thread_id`` used to be admitted,
decided and executed, and then the ``X-Turngate-Thread`` response header could not be encoded:
a 500 after the turn ran, which the official SDK retries (its default ``max_retries=2``) as new
calls: three provider calls and three EXECUTIONs for one call. Ids in headers are now
percent-encoded UTF-8, and decode back to what was sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote

import openai
import pytest

from tests.fakes import FakeOpenAIServer, fake_openai
from tests.integration.test_openai_compat import REPLY, _key, fake_settings, keyed_stack
from tests.stack import Stack
from turngate.client import turn_headers

THREADS = ["支持-42 🧵", "スレッド", "emoji-only-🙂🙃", "Grüße 100%"]


@pytest.fixture
def provider() -> Iterator[FakeOpenAIServer]:
    with fake_openai(REPLY) as server:
        yield server


def retrying_sdk(stack: Stack) -> openai.AsyncOpenAI:
    """The SDK as programs use it: its default retries on (a 5xx is sent again)."""
    return openai.AsyncOpenAI(base_url=f"{stack.http.base_url}/v1", api_key=_key(stack))


async def thread_events(stack: Stack, thread: str) -> list[dict[str, Any]]:
    page = (await stack.http.get("/snapshot", params={"thread_id": thread, "limit": 100})).json()
    return list(page["events"])


@pytest.mark.parametrize("thread", THREADS)
async def test_a_non_latin1_thread_id_is_one_call_one_turn_and_decodes_back(
    tmp_path, temporal_server, provider: FakeOpenAIServer, thread: str
) -> None:
    async with keyed_stack(fake_settings(tmp_path, temporal_server, provider)) as stack:
        client = retrying_sdk(stack)
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "hello"}],
            metadata={"thread_id": thread},
        )
        assert raw.status_code == 200
        completion = raw.parse()
        # one call: one provider call, one turn recorded
        assert len(provider.requests) == 1
        kinds = [e["kind"] for e in await thread_events(stack, thread)]
        assert kinds == ["INTENT", "DECISION", "EXECUTION"]
        # the headers are ASCII and decode back to the ids as sent
        header = raw.headers["x-turngate-thread"]
        assert header.isascii() and unquote(header) == thread
        assert turn_headers(raw.headers) == {
            "X-Turngate-Thread": thread,
            "X-Turngate-Turn": completion.id,
            "X-Turngate-Correlation-Id": completion.id,
            "X-Turngate-Decision": "ALLOW",
        }

        # The header copied from the answer names the same thread: the history matches it.
        again = await client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini",
            messages=[
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": completion.choices[0].message.content},
                {"role": "user", "content": "and again"},
            ],
            extra_headers={"X-Turngate-Thread": header},
        )
        assert again.status_code == 200
        assert turn_headers(again.headers)["X-Turngate-Thread"] == thread
        assert len(provider.requests) == 2
        assert [e["kind"] for e in await thread_events(stack, thread)].count("EXECUTION") == 2

        # Streamed: the same headers, before the first frame.
        async with client.chat.completions.with_streaming_response.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "streamed"}],
            metadata={"thread_id": thread, "idempotency_key": "k-stream"},
            stream=True,
        ) as streamed:
            assert streamed.status_code == 200
            assert turn_headers(streamed.headers)["X-Turngate-Thread"] == thread
            assert [line async for line in streamed.iter_lines() if line][-1] == "data: [DONE]"
        assert len(provider.requests) == 3


async def test_a_denied_turn_on_a_non_latin1_thread_is_a_403_with_decodable_headers(settings) -> None:
    thread = "拒否-🚫"
    async with keyed_stack(settings) as stack:
        client = retrying_sdk(stack)
        with pytest.raises(openai.PermissionDeniedError) as caught:
            await client.chat.completions.create(
                model="no-such-model",
                messages=[{"role": "user", "content": "hello"}],
                metadata={"thread_id": thread},
            )
        headers = caught.value.response.headers
        assert headers["x-turngate-thread"] == quote(thread, safe="")
        assert turn_headers(headers)["X-Turngate-Thread"] == thread
        assert [e["kind"] for e in await thread_events(stack, thread)] == ["INTENT", "DECISION"]
