"""The provider call: a regular activity on the `llm` task queue (its slots are the LLM
concurrency limit), streaming, heartbeating, and classifying errors where they are raised.

Deltas go to a token bus (``turngate.streaming``), a side channel for live subscribers: each
attempt announces itself (``start`` with ``activity.info().attempt``; a retry voids the earlier
attempt's tokens), publishes its deltas with a sequence number and ends with ``finish`` (with the
error type when it failed). The activity returns the full text, so the EXECUTION record and
replay never depend on the stream, and a failing bus never fails the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError

from turngate.providers.base import ChatMessage, Provider, ProviderError, ProviderRequest
from turngate.streaming.base import NullBus, TokenPublisher
from turngate.workflows.shared import ProviderCallInput, ProviderCallResult

log = logging.getLogger(__name__)
HEARTBEAT_EVERY_S = 2.0

# Former names (the worker imported them before the token bus existed).
TokenSink = TokenPublisher
NullSink = NullBus


class _Stream:
    """One attempt's view of the bus. A bus failure is logged once and streaming stops for the
    rest of the call; the provider call itself carries on."""

    def __init__(self, bus: TokenPublisher, correlation_id: str, attempt: int) -> None:
        self._bus = bus
        self._cid = correlation_id
        self._attempt = attempt
        self._ok = True

    async def _guard(self, action: str, call: Callable[[], Awaitable[None]]) -> None:
        if not self._ok:
            return
        try:
            await call()
        except Exception as exc:
            self._ok = False
            log.warning("token bus %s failed for %s; streaming stops: %s", action, self._cid, exc)

    async def start(self) -> None:
        await self._guard("start", lambda: self._bus.start(self._cid, self._attempt))

    async def publish(self, seq: int, text: str) -> None:
        await self._guard("publish", lambda: self._bus.publish(self._cid, self._attempt, seq, text))

    async def finish(self, error: str | None = None) -> None:
        await self._guard("finish", lambda: self._bus.finish(self._cid, self._attempt, error=error))


class ProviderActivities:
    def __init__(self, providers: dict[str, Provider], bus: TokenPublisher | None = None) -> None:
        self._providers = providers
        self._bus: TokenPublisher = bus or NullBus()

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
        stream = _Stream(self._bus, inp.correlation_id, activity.info().attempt)
        beat = asyncio.create_task(_heartbeat_forever())
        parts: list[str] = []
        usage: dict[str, int | None] = {}
        try:
            await stream.start()
            seq = 0
            async for chunk in provider.stream(request):
                if chunk.text:
                    parts.append(chunk.text)
                    await stream.publish(seq, chunk.text)
                    seq += 1
                if chunk.usage is not None:
                    usage = chunk.usage.model_dump()
        except ProviderError as exc:
            await stream.finish(error=exc.type)
            raise _application_error(exc) from exc
        except asyncio.CancelledError:
            # Cancelled (timeout, worker shutdown): tell subscribers, without delaying the cancel much.
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(stream.finish(error="activity.cancelled")), 1.0)
            raise
        except Exception as exc:
            # Temporal reports an unexpected exception under its class name: so does the stream.
            await stream.finish(error=type(exc).__name__)
            raise
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
        await stream.finish()
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
