"""The provider call: a regular activity on the `llm` task queue (its slots are the LLM
concurrency limit), streaming, heartbeating, and classifying errors where they are raised.

The activity returns the full text, so the EXECUTION record and replay never depend on the
token stream that subscribers may watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import timedelta
from typing import Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError

from turngate.providers.base import ChatMessage, Provider, ProviderError, ProviderRequest
from turngate.workflows.shared import ProviderCallInput, ProviderCallResult

HEARTBEAT_EVERY_S = 2.0


class TokenSink(Protocol):
    """Where streamed deltas go for live subscribers (a side channel, never history)."""

    async def publish(self, correlation_id: str, seq: int, text: str) -> None: ...

    async def finish(self, correlation_id: str, *, error: str | None = None) -> None: ...


class NullSink:
    async def publish(self, correlation_id: str, seq: int, text: str) -> None:
        return None

    async def finish(self, correlation_id: str, *, error: str | None = None) -> None:
        return None


class ProviderActivities:
    def __init__(self, providers: dict[str, Provider], sink: TokenSink | None = None) -> None:
        self._providers = providers
        self._sink: TokenSink = sink or NullSink()

    @activity.defn(name="turngate.call_provider")
    async def call_provider(self, inp: ProviderCallInput) -> ProviderCallResult:
        provider = self._providers.get(inp.provider)
        if provider is None:
            raise ApplicationError(
                f"provider {inp.provider!r} is not configured on this worker",
                type="provider.missing_credentials",
                non_retryable=True,
            )
        request = ProviderRequest(
            provider=inp.provider,
            model=inp.model,
            messages=[ChatMessage(**m) for m in inp.messages],  # type: ignore[arg-type]
            max_tokens=inp.max_tokens,
        )
        started = time.monotonic()
        beat = asyncio.create_task(_heartbeat_forever())
        parts: list[str] = []
        usage: dict[str, int | None] = {}
        try:
            seq = 0
            async for chunk in provider.stream(request):
                if chunk.text:
                    parts.append(chunk.text)
                    await self._sink.publish(inp.correlation_id, seq, chunk.text)
                    seq += 1
                if chunk.usage is not None:
                    usage = chunk.usage.model_dump()
        except ProviderError as exc:
            await self._sink.finish(inp.correlation_id, error=exc.type)
            raise _application_error(exc) from exc
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
        await self._sink.finish(inp.correlation_id)
        return ProviderCallResult(
            provider=inp.provider,
            model=inp.model,
            output_text="".join(parts),
            usage=usage,
            duration_ms=int((time.monotonic() - started) * 1000),
        )


async def _heartbeat_forever() -> None:
    # Cancellation and worker loss are noticed only through heartbeats, also before the first token.
    while True:
        activity.heartbeat()
        await asyncio.sleep(HEARTBEAT_EVERY_S)


def _application_error(exc: ProviderError) -> ApplicationError:
    delay = timedelta(seconds=exc.retry_after_s) if exc.retry_after_s else None
    return ApplicationError(
        exc.message,
        {"status_code": exc.status_code, "code": exc.type},
        type=exc.type,
        non_retryable=not exc.retryable,
        next_retry_delay=delay,
    )
