"""``echo``: an offline, deterministic stand-in for a model (not a model; always labelled so).

It answers ``"echo: " + <last user message>``, streamed word by word: each chunk is one word
plus the whitespace that follows it, so the chunks join to exactly the answer. Usage counts
whitespace-separated words: ``output_tokens`` over the answer, ``input_tokens`` over the WHOLE
message list (system, context and user messages). That is how it proves it saw everything it
was sent without changing the answer: with a system prompt or earlier context the text stays
the echo of the last user message and only ``input_tokens`` grows.

Tool hook (the offline way to exercise tool gating): when the request offers tools and the last
user message contains ``/tool <name> <json-object>`` (e.g. ``/tool transition_phase {"signal":
"understood"}``), echo also emits that tool call, after the echo text: id ``echo-call-1``
(``echo-call-2``, ... for further ``/tool`` directives in the same message), the name as
written, and the arguments text exactly as written (the JSON object; when what follows the name
is not a JSON object, the rest of that line verbatim, so invalid arguments can be exercised too).
The name need not be one of the offered tools (so a call to a tool that was not offered can be
exercised). Without offered tools, ``/tool`` is just text.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

from turngate.providers.base import ProviderError, ProviderRequest, StreamChunk, ToolCallChunk, Usage
from turngate.settings import Settings

ECHO_PREFIX = "echo: "
ECHO_MODELS: tuple[str, ...] = ("echo-1",)
ECHO_CALL_ID_PREFIX = "echo-call-"
_WORD = re.compile(r"\S+\s*")
_TOOL_DIRECTIVE = re.compile(r"(?:^|(?<=\s))/tool[ \t]+([^\s{]+)[ \t]*")
_JSON = json.JSONDecoder()


def echo_answer(request: ProviderRequest) -> str:
    """The full answer echo gives for ``request`` (the joined text of its chunks)."""
    for message in reversed(request.messages):
        if message.role == "user":
            return ECHO_PREFIX + message.content
    raise ProviderError("provider.bad_request", "echo: the request has no user message", retryable=False)


def last_user_message(request: ProviderRequest) -> str | None:
    for message in reversed(request.messages):
        if message.role == "user":
            return message.content
    return None


def echo_tool_calls(request: ProviderRequest) -> list[ToolCallChunk]:
    """The tool calls echo makes for ``request``: one per ``/tool <name> <json-object>`` directive
    in the last user message, only when tools are offered (see the module docstring)."""
    text = last_user_message(request)
    if not request.tools or text is None:
        return []
    calls: list[ToolCallChunk] = []
    for match in _TOOL_DIRECTIVE.finditer(text):
        rest = text[match.end() :]
        try:
            value, end = _JSON.raw_decode(rest)
        except ValueError:
            value, end = None, 0
        # A JSON object: exactly its text; anything else: the rest of the line, verbatim.
        arguments = rest[:end] if isinstance(value, dict) else rest.split("\n", 1)[0].strip()
        calls.append(
            ToolCallChunk(
                id=f"{ECHO_CALL_ID_PREFIX}{len(calls) + 1}",
                name=match.group(1),
                arguments=arguments or "{}",
            )
        )
    return calls


def count_words(text: str) -> int:
    return len(text.split())


class EchoProvider:
    """The offline provider: deterministic, no network, optional latency and delay between chunks."""

    name = "echo"
    models: tuple[str, ...] = ECHO_MODELS

    def __init__(self, *, delay_ms: int = 0, latency_ms: int = 0) -> None:
        self._delay_s = max(0, delay_ms) / 1000.0
        self._latency_s = max(0, latency_ms) / 1000.0

    @classmethod
    def from_settings(cls, settings: Settings) -> EchoProvider:
        return cls(delay_ms=settings.echo_delay_ms, latency_ms=settings.echo_latency_ms)

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamChunk]:
        answer = echo_answer(request)
        words = _WORD.findall(answer)
        if self._latency_s:
            await asyncio.sleep(self._latency_s)
        for index, word in enumerate(words):
            if index and self._delay_s:
                await asyncio.sleep(self._delay_s)
            yield StreamChunk(text=word)
        calls = echo_tool_calls(request)
        if calls:
            yield StreamChunk(tool_calls=calls)
        yield StreamChunk(
            usage=Usage(
                input_tokens=sum(count_words(m.content) for m in request.messages),
                output_tokens=len(words),
            )
        )

    async def aclose(self) -> None:
        return None
