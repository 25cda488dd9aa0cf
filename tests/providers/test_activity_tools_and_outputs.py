"""The provider activity: tools in, tool calls out, and answers over 64 KB offloaded to artifacts."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.providers.test_tool_calls import CALL, TRANSITION
from turngate.activities.provider import OUTPUT_PREVIEW_CHARS, ProviderActivities
from turngate.artifacts import INLINE_LIMIT_BYTES, ArtifactUnavailableError, LocalArtifactStore
from turngate.core.limits import TEXT_INLINE_LIMIT_BYTES
from turngate.core.manifest import ArtifactPointer
from turngate.providers.base import ProviderRequest, StreamChunk, ToolCallChunk, Usage
from turngate.providers.echo import EchoProvider
from turngate.workflows.shared import ProviderCallInput


class ScriptedProvider:
    """Streams the given text in 1000-character pieces, then the given tool calls."""

    name = "scripted"
    models: tuple[str, ...] = ("s-1",)

    def __init__(self, text: str, calls: list[ToolCallChunk] | None = None) -> None:
        self.text = text
        self.calls = calls or []
        self.requests: list[ProviderRequest] = []

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamChunk]:
        self.requests.append(request)
        for start in range(0, len(self.text), 1000):
            yield StreamChunk(text=self.text[start : start + 1000])
        if self.calls:
            yield StreamChunk(tool_calls=self.calls)
        yield StreamChunk(usage=Usage(input_tokens=1, output_tokens=2))

    async def aclose(self) -> None:
        return None


class BrokenStore(LocalArtifactStore):
    def __init__(self, root: Path, *, retryable: bool) -> None:
        super().__init__(root)
        self.retryable = retryable
        self.threads: list[str] = []

    def put(self, data: bytes, **kw: object) -> ArtifactPointer:  # type: ignore[override]
        self.threads.append(threading.current_thread().name)
        raise ArtifactUnavailableError("disk on fire", retryable=self.retryable)


def call_input(provider: str = "scripted", message: str = "hi", **kw: object) -> ProviderCallInput:
    return ProviderCallInput(
        correlation_id="c-1",
        provider=provider,
        model="m-1",
        messages=[{"role": "user", "content": message}],
        **kw,  # type: ignore[arg-type]
    )


async def test_tools_reach_the_provider_and_calls_come_back_decoded() -> None:
    provider = ScriptedProvider(
        "ok",
        [
            ToolCallChunk(id="c1", name="transition_phase", arguments='{"signal": "understood"}'),
            ToolCallChunk(id="c2", name="transition_phase", arguments='{"signal": '),
            ToolCallChunk(id="c3", name="transition_phase", arguments="[1]"),
        ],
    )
    activities = ProviderActivities({"scripted": provider})
    result = await ActivityEnvironment().run(
        activities.call_provider, call_input(tools=[TRANSITION.definition()])
    )
    (request,) = provider.requests
    assert [tool.model_dump() for tool in request.tools] == [TRANSITION.definition()]
    assert result.output_text == "ok"
    assert result.tool_calls == [
        {"id": "c1", "name": "transition_phase", "arguments": {"signal": "understood"}},
        {"id": "c2", "name": "transition_phase", "arguments": {}, "arguments_raw": '{"signal": '},
        {"id": "c3", "name": "transition_phase", "arguments": {}, "arguments_raw": "[1]"},
    ]
    assert result.output_artifact is None and result.output_truncated is False


async def test_no_tools_no_calls() -> None:
    provider = ScriptedProvider("ok")
    result = await ActivityEnvironment().run(
        ProviderActivities({"scripted": provider}).call_provider, call_input()
    )
    assert provider.requests[0].tools == []
    assert result.tool_calls == []


async def test_echo_tool_hook_through_the_activity() -> None:
    activities = ProviderActivities({"echo": EchoProvider()})
    message = 'Got it. /tool transition_phase {"signal": "understood"}'
    result = await ActivityEnvironment().run(
        activities.call_provider, call_input("echo", message, tools=[TRANSITION.definition()])
    )
    assert result.output_text == "echo: " + message
    assert result.tool_calls == [{"id": "echo-call-1"} | CALL]


async def test_large_answer_goes_to_the_artifact_store(tmp_path: Path) -> None:
    text = "ž" * (TEXT_INLINE_LIMIT_BYTES // 2) + "tail"  # 2 bytes per "ž": over the limit in UTF-8
    assert len(text) < TEXT_INLINE_LIMIT_BYTES < len(text.encode())
    store = LocalArtifactStore(tmp_path / "artifacts")
    activities = ProviderActivities({"scripted": ScriptedProvider(text)}, artifacts=store)
    result = await ActivityEnvironment().run(activities.call_provider, call_input())
    assert result.output_truncated is True
    assert result.output_text == text[:OUTPUT_PREVIEW_CHARS]
    assert result.output_artifact is not None
    pointer = ArtifactPointer.model_validate(result.output_artifact)
    assert pointer.size_bytes == len(text.encode())
    assert pointer.path.startswith("standard/output/")
    assert store.get(pointer).decode() == text
    assert store.check(pointer).ok
    assert len(result.model_dump_json().encode()) < INLINE_LIMIT_BYTES
    assert result.usage == {"input_tokens": 1, "output_tokens": 2}


@pytest.mark.parametrize("text", ["a" * TEXT_INLINE_LIMIT_BYTES, "ž" * (TEXT_INLINE_LIMIT_BYTES // 2)])
async def test_answer_at_the_limit_stays_inline(tmp_path: Path, text: str) -> None:
    assert len(text.encode()) == TEXT_INLINE_LIMIT_BYTES
    store = LocalArtifactStore(tmp_path / "artifacts")
    activities = ProviderActivities({"scripted": ScriptedProvider(text)}, artifacts=store)
    result = await ActivityEnvironment().run(activities.call_provider, call_input())
    assert result.output_text == text
    assert result.output_artifact is None and result.output_truncated is False
    assert list(store.iter_artifacts()) == []


async def test_answer_one_byte_over_the_limit_is_offloaded(tmp_path: Path) -> None:
    text = "ž" * (TEXT_INLINE_LIMIT_BYTES // 2 - 1) + "abc"  # one byte over, in fewer characters
    assert len(text.encode()) == TEXT_INLINE_LIMIT_BYTES + 1
    store = LocalArtifactStore(tmp_path / "artifacts")
    activities = ProviderActivities({"scripted": ScriptedProvider(text)}, artifacts=store)
    result = await ActivityEnvironment().run(activities.call_provider, call_input())
    assert result.output_truncated is True and result.output_artifact is not None


async def test_without_a_store_a_large_answer_is_returned_whole() -> None:
    text = "b" * (INLINE_LIMIT_BYTES + 10)
    activities = ProviderActivities({"scripted": ScriptedProvider(text)}, None)
    result = await ActivityEnvironment().run(activities.call_provider, call_input())
    assert result.output_text == text and result.output_artifact is None


@pytest.mark.parametrize("retryable", [True, False])
async def test_a_failing_store_fails_the_attempt(tmp_path: Path, retryable: bool) -> None:
    store = BrokenStore(tmp_path, retryable=retryable)
    activities = ProviderActivities(
        {"scripted": ScriptedProvider("c" * (INLINE_LIMIT_BYTES + 1))}, None, store
    )
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(activities.call_provider, call_input())
    assert info.value.type == "artifact.unavailable"
    assert info.value.non_retryable is (not retryable)
    # The blocking put ran in a worker thread, never on the event loop's thread.
    assert store.threads and store.threads[0] != threading.main_thread().name


async def test_offloaded_history_is_loaded_whole_only_where_it_continues_its_preview(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "artifacts")
    whole = "earlier " * 5000
    other = "unrelated " * 5000
    good = store.put(whole.encode(), kind="message").model_dump(mode="json")
    foreign = store.put(other.encode(), kind="message").model_dump(mode="json")
    provider = ScriptedProvider("ok")
    activities = ProviderActivities({"scripted": provider}, artifacts=store)
    call = ProviderCallInput(
        correlation_id="c-1",
        provider="scripted",
        model="s-1",
        messages=[
            {"role": "user", "content": whole[:4096]},
            {"role": "assistant", "content": "short"},
            {"role": "user", "content": whole[:4096]},  # names an artifact that is not its text
            {"role": "user", "content": "now"},
        ],
        message_artifacts={0: good, 2: foreign},
    )
    await ActivityEnvironment().run(activities.call_provider, call)
    sent = [m.content for m in provider.requests[0].messages]
    assert sent == [whole, "short", whole[:4096], "now"]


async def test_an_offloaded_text_that_fails_its_sha256_fails_the_call(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "artifacts")
    pointer = store.put(b"the recorded text " * 2000, kind="message")
    (tmp_path / "artifacts" / pointer.path).write_bytes(b"the recorded text, tampered" * 100)
    activities = ProviderActivities({"scripted": ScriptedProvider("ok")}, artifacts=store)
    call = call_input(message="the recorded text").model_copy(
        update={"message_artifact": pointer.model_dump(mode="json")}
    )
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(activities.call_provider, call)
    assert info.value.type == "artifact.mismatch" and info.value.non_retryable
