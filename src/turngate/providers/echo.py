"""``echo``: an offline, deterministic stand-in for a model (not a model; always labelled so).

It answers ``"echo: " + <last user message>``, streamed word by word: each chunk is one word
plus the whitespace that follows it, so the chunks join to exactly the answer. Usage counts
whitespace-separated words: ``output_tokens`` over the answer, ``input_tokens`` over the WHOLE
message list (system, context and user messages). That is how it proves it saw everything it
was sent without changing the answer: with a system prompt or earlier context the text stays
the echo of the last user message and only ``input_tokens`` grows.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

from turngate.providers.base import ProviderError, ProviderRequest, StreamChunk, Usage
from turngate.settings import Settings

ECHO_PREFIX = "echo: "
ECHO_MODELS: tuple[str, ...] = ("echo-1",)
_WORD = re.compile(r"\S+\s*")


def echo_answer(request: ProviderRequest) -> str:
    """The full answer echo gives for ``request`` (the joined text of its chunks)."""
    for message in reversed(request.messages):
        if message.role == "user":
            return ECHO_PREFIX + message.content
    raise ProviderError("provider.bad_request", "echo: the request has no user message", retryable=False)


def count_words(text: str) -> int:
    return len(text.split())


class EchoProvider:
    """The offline provider: deterministic, no network, optional delay between chunks."""

    name = "echo"
    models: tuple[str, ...] = ECHO_MODELS

    def __init__(self, *, delay_ms: int = 0) -> None:
        self._delay_s = max(0, delay_ms) / 1000.0

    @classmethod
    def from_settings(cls, settings: Settings) -> EchoProvider:
        return cls(delay_ms=settings.echo_delay_ms)

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamChunk]:
        answer = echo_answer(request)
        words = _WORD.findall(answer)
        for index, word in enumerate(words):
            if index and self._delay_s:
                await asyncio.sleep(self._delay_s)
            yield StreamChunk(text=word)
        yield StreamChunk(
            usage=Usage(
                input_tokens=sum(count_words(m.content) for m in request.messages),
                output_tokens=len(words),
            )
        )

    async def aclose(self) -> None:
        return None
