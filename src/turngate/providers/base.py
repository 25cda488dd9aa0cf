"""The provider contract: every provider streams text for the whole assembled message list.

Providers are plain async adapters over the vendors' official SDKs (or the offline ``echo``);
the Temporal activity in ``turngate.activities.provider`` owns retries, heartbeats, timeouts
and the token side channel.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict


class ChatMessage(BaseModel):
    model_config = ConfigDict(frozen=True)
    role: Literal["system", "user", "assistant"]
    content: str


class ProviderRequest(BaseModel):
    """What an execution sends: provider, model and the full message list, in order."""

    model_config = ConfigDict(frozen=True)
    provider: str
    model: str
    messages: list[ChatMessage]
    max_tokens: int | None = None


class Usage(BaseModel):
    input_tokens: int | None = None
    output_tokens: int | None = None


class StreamChunk(BaseModel):
    """One streamed piece: a text delta, or (last) the usage the provider reported."""

    text: str = ""
    usage: Usage | None = None


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
