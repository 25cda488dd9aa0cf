"""The provider contract: every provider streams text for the whole assembled message list.

Providers are plain async adapters over the vendors' official SDKs (or the offline ``echo``);
the Temporal activity in ``turngate.activities.provider`` owns retries, heartbeats, timeouts
and the token side channel.

A stream is: text deltas (``StreamChunk.text``), then at most one chunk carrying every tool call
the model made (``StreamChunk.tool_calls``, complete calls only: adapters accumulate the vendors'
argument fragments), then exactly one final chunk with the ``Usage``. Tools are offered with
``ProviderRequest.tools``; an empty list sends no tools at all.

A tool loop continues with an ``assistant`` message carrying the calls the model made
(``ChatMessage.tool_calls``) followed by one ``tool`` message per result
(``ChatMessage.tool_call_id``); each adapter sends them in its vendor's shape.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from turngate.core.messages import ChatMessage, ToolCallChunk
from turngate.core.request_options import ProviderOptions

__all__ = [
    "ChatMessage",
    "Provider",
    "ProviderError",
    "ProviderRequest",
    "ResponseIdOnce",
    "StreamChunk",
    "ToolCallChunk",
    "ToolDefinition",
    "Usage",
]


def _empty_object_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


class ToolDefinition(BaseModel):
    """A tool offered to the model: provider-neutral, as ``ToolSpec.definition()`` gives it.

    ``parameters`` is the JSON schema (type ``object``) of the call's arguments.
    """

    model_config = ConfigDict(frozen=True)
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=_empty_object_schema)


class Usage(BaseModel):
    input_tokens: int | None = None
    output_tokens: int | None = None


class ProviderRequest(BaseModel):
    """What an execution sends: provider, model, the full message list in order, and the tools
    offered this turn (none: no tools are sent)."""

    model_config = ConfigDict(frozen=True)
    provider: str
    model: str
    messages: list[ChatMessage]
    max_tokens: int | None = None
    tools: list[ToolDefinition] = Field(default_factory=list)
    temperature: float | None = None  # None: the vendor's default
    # Structured output, tool choice, sampling (None: none asked; each adapter maps or refuses).
    options: ProviderOptions | None = None


class StreamChunk(BaseModel):
    """One streamed piece: a text delta, the model's complete tool calls, (last) the usage the
    provider reported, or (once, first) the vendor's id of the response."""

    text: str = ""
    usage: Usage | None = None
    tool_calls: list[ToolCallChunk] | None = None
    response_id: str | None = None


class ResponseIdOnce:
    """The vendor's response id, handed out with the first chunk a provider yields after it is
    seen (so a stream's chunks stay text, tool calls and usage: no chunk only for the id)."""

    def __init__(self) -> None:
        self._id: str | None = None
        self._sent = False

    def see(self, response_id: str | None) -> None:
        if self._id is None and response_id:
            self._id = response_id

    def take(self) -> str | None:
        if self._sent or self._id is None:
            return None
        self._sent = True
        return self._id


class ProviderError(Exception):
    """A classified provider failure. ``type`` is stable (``provider.bad_request``, ...)."""

    def __init__(
        self,
        type: str,
        message: str,
        *,
        retryable: bool,
        status_code: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.type = type
        self.message = message
        self.retryable = retryable
        self.status_code = status_code
        self.retry_after_s = retry_after_s


@runtime_checkable
class Provider(Protocol):
    name: str
    models: tuple[str, ...]

    def stream(self, request: ProviderRequest) -> AsyncIterator[StreamChunk]: ...

    async def aclose(self) -> None: ...
