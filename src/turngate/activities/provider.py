"""The provider call: a regular activity on the `llm` task queue (``concurrency`` calls at once
per worker: the LLM concurrency limit), streaming, heartbeating, and classifying errors where
they are raised.

Deltas go to a token bus (``turngate.streaming``), a side channel for live subscribers: each
attempt announces itself (``start`` with ``activity.info().attempt``; a retry voids the earlier
attempt's tokens), publishes its deltas with a sequence number and ends with ``finish`` (with the
error type when it failed). The activity returns the full text, so the EXECUTION record and
replay never depend on the stream, and a failing bus never fails the call.

Tools offered for the turn (``ProviderCallInput.tools``) go to the provider; the calls the model
made come back in ``ProviderCallResult.tool_calls`` as ``{id, name, arguments}`` with
``arguments`` decoded to a dict (arguments that are not a JSON object: ``arguments: {}`` plus the
text as the model sent it under ``arguments_raw``). Admission is the workflow's business.

An answer whose UTF-8 size is over ``TEXT_INLINE_LIMIT_BYTES`` (16 KiB) never travels through Temporal
when the activity has an artifact store: the full text is stored (kind ``output``,
``text/plain; charset=utf-8``) and the result carries the first :data:`OUTPUT_PREVIEW_CHARS`
characters, ``output_truncated=True`` and ``output_artifact`` (the pointer). A store that fails
fails the attempt with ``artifact.unavailable`` (retryable unless the store says it cannot help).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from turngate.activities.heartbeat import heartbeating
from turngate.artifacts import ArtifactError, ArtifactStore, aget
from turngate.artifacts.store import normalize_digest
from turngate.core.canonical import digest_bytes
from turngate.core.limits import TEXT_INLINE_LIMIT_BYTES, TEXT_PREVIEW_CHARS
from turngate.core.safety import REDACTED_OUTPUT_KIND, SafetyRules, SafetyVerdict, check_output
from turngate.providers.base import (
    ChatMessage,
    Provider,
    ProviderError,
    ProviderRequest,
    ToolCallChunk,
    ToolDefinition,
)
from turngate.streaming.base import NullBus, TokenPublisher
from turngate.telemetry import ProviderCall, TurngateMetrics, provider_span
from turngate.workflows.shared import ProviderCallInput, ProviderCallResult
from turngate.workflows.turn_activities import CALL_PROVIDER

log = logging.getLogger(__name__)
#: How much of an offloaded answer stays inline (characters).
OUTPUT_PREVIEW_CHARS = TEXT_PREVIEW_CHARS
OUTPUT_ARTIFACT_KIND = "output"
OUTPUT_MEDIA_TYPE = "text/plain; charset=utf-8"


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
    """``artifacts``: where answers over the inline limit go (None: they are returned inline)."""

    def __init__(
        self,
        providers: dict[str, Provider],
        bus: TokenPublisher | None = None,
        artifacts: ArtifactStore | None = None,
        metrics: TurngateMetrics | None = None,
        concurrency: int | None = None,
    ) -> None:
        self._providers = providers
        self._bus: TokenPublisher = bus or NullBus()
        self._artifacts = artifacts
        self._metrics = metrics
        # The worker's LLM concurrency limit. The llm queue's slots cannot be it: a local call
        # has no queue, and the turn step (call_and_record) holds its slot through two ledger
        # appends around the call, which must not count as LLM work.
        self._slots = asyncio.Semaphore(concurrency) if concurrency else None

    async def _full_message(self, pointer: dict[str, Any]) -> str:
        """A whole message or answer the gateway stored as an artifact (only a preview travels),
        checked against the pointer's sha256."""
        if self._artifacts is None:
            raise ApplicationError(
                "this worker has no artifact store to read a large message from",
                type="artifact.unavailable",
                non_retryable=True,
            )
        try:
            data = await aget(self._artifacts, pointer["artifact_id"])
        except ArtifactError as exc:
            raise ApplicationError(str(exc), type="artifact.unavailable") from exc
        if digest_bytes(data) != normalize_digest(str(pointer.get("sha256", ""))):
            raise ApplicationError(
                f"artifact {pointer.get('artifact_id')} does not hash to its pointer",
                type="artifact.mismatch",
                non_retryable=True,
            )
        return data.decode("utf-8")

    async def _whole_history(self, inp: ProviderCallInput) -> dict[int, str]:
        """Referenced messages and answers that were offloaded, loaded whole, by their position in
        ``inp.messages``. A text that does not begin with the recorded preview is not the one
        recorded: the preview stays (and a warning says so)."""
        whole: dict[int, str] = {}
        for position, pointer in sorted(inp.message_artifacts.items()):
            if not 0 <= position < len(inp.messages):
                continue
            text = await self._full_message(pointer)
            if continues_preview(text, inp.messages[position], pointer):
                whole[position] = text
        return whole

    @activity.defn(name=CALL_PROVIDER)
    async def call_provider(self, inp: ProviderCallInput) -> ProviderCallResult:
        # A GenAI client span (content only with TURNGATE_TRACE_CONTENT) plus latency/token metrics.
        provider = self._providers.get(inp.provider)
        with provider_span(
            inp.provider,
            inp.model,
            metrics=self._metrics,
            attributes={"turngate.correlation_id": inp.correlation_id},
            conversation_id=inp.thread_id,
            max_tokens=inp.max_tokens,
            server_url=getattr(provider, "base_url", None),
        ) as traced:
            traced.record_input(inp.messages)
            if self._slots is not None:
                await self._take_slot()
                try:
                    result = await self._call_provider(inp, traced)
                finally:
                    self._slots.release()
            else:
                result = await self._call_provider(inp, traced)
            traced.record_usage(result.usage)
            traced.record_response(model=result.model)
            traced.record_output(result.output_text)
            return result

    async def _take_slot(self) -> None:
        """Wait for a free LLM slot, heartbeating meanwhile (a queued call is alive, and a
        cancellation reaches it)."""
        assert self._slots is not None
        async with heartbeating():
            await self._slots.acquire()

    async def _call_provider(self, inp: ProviderCallInput, traced: ProviderCall) -> ProviderCallResult:
        provider = self._providers.get(inp.provider)
        if provider is None:
            raise ApplicationError(
                f"provider {inp.provider!r} is not configured on this worker",
                type="provider.missing_credentials",
                non_retryable=True,
            )
        full = await self._full_message(inp.message_artifact) if inp.message_artifact is not None else None
        request = provider_request(inp, full, await self._whole_history(inp))
        started = time.monotonic()
        stream = _Stream(self._bus, inp.correlation_id, activity.info().attempt)
        async with heartbeating():
            parts: list[str] = []
            calls: list[ToolCallChunk] = []
            usage: dict[str, int | None] = {}
            try:
                await stream.start()
                seq = 0
                async for chunk in provider.stream(request):
                    if chunk.text:
                        parts.append(chunk.text)
                        await stream.publish(seq, chunk.text)
                        seq += 1
                    if chunk.tool_calls:
                        calls.extend(chunk.tool_calls)
                    if chunk.usage is not None:
                        usage = chunk.usage.model_dump()
                    if chunk.response_id:
                        traced.record_response_id(chunk.response_id)
                text = "".join(parts)
                verdict = _verdict(text, inp.output_safety)
                redacted = None if verdict is None or verdict.ok else await self._store_redacted(text)
                offloaded = None if redacted is not None else await self._offload(text)
            except ProviderError as exc:
                await stream.finish(error=exc.type)
                raise _application_error(exc) from exc
            except ArtifactError as exc:
                await stream.finish(error=exc.code)
                raise ApplicationError(
                    f"the answer could not be stored as an artifact: {exc}",
                    {"code": exc.code},
                    type=exc.code,
                    non_retryable=not exc.retryable,
                ) from exc
            except asyncio.CancelledError:
                # Cancelled (timeout, worker shutdown): tell subscribers, without delaying the cancel much.
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(asyncio.shield(stream.finish(error="activity.cancelled")), 1.0)
                raise
            except Exception as exc:
                # Temporal reports an unexpected exception under its class name: so does the stream.
                await stream.finish(error=type(exc).__name__)
                raise
        await stream.finish()
        if redacted is not None:
            text = ""  # nothing of a redacted answer leaves the activity but the snapshot pointer
        return ProviderCallResult(
            provider=inp.provider,
            model=inp.model,
            output_text=text if offloaded is None else text[:OUTPUT_PREVIEW_CHARS],
            usage=usage,
            duration_ms=int((time.monotonic() - started) * 1000),
            tool_calls=[tool_call_record(call) for call in calls],
            output_artifact=offloaded,
            output_truncated=offloaded is not None,
            safety=verdict,
            redacted_output=redacted,
        )

    async def _store_redacted(self, text: str) -> dict[str, Any]:
        """The raw answer a safety rule redacted: only in a restricted snapshot artifact."""
        if self._artifacts is None:
            raise ApplicationError(
                "this worker has no artifact store for the redaction snapshot",
                type="artifact.unavailable",
                non_retryable=True,
            )
        pointer = await asyncio.to_thread(
            self._artifacts.put,
            text.encode("utf-8"),
            kind=REDACTED_OUTPUT_KIND,
            retention="snapshot",
            media_type=OUTPUT_MEDIA_TYPE,
        )
        return pointer.recorded()

    async def _offload(self, text: str) -> dict[str, Any] | None:
        """The pointer (JSON) of the stored answer when it is over the inline limit, else None."""
        if self._artifacts is None:
            return None
        data = text.encode("utf-8")
        if len(data) <= TEXT_INLINE_LIMIT_BYTES:
            return None
        pointer = await asyncio.to_thread(
            self._artifacts.put, data, kind=OUTPUT_ARTIFACT_KIND, media_type=OUTPUT_MEDIA_TYPE
        )
        return pointer.recorded()


def continues_preview(text: str, preview: ChatMessage, pointer: Mapping[str, Any]) -> bool:
    """Whether an offloaded text read back begins with the preview the turn recorded."""
    if text.startswith(preview.content):
        return True
    log.warning("artifact %s does not continue its preview; kept the preview", pointer.get("artifact_id"))
    return False


def provider_request(
    inp: ProviderCallInput, full_message: str | None = None, history: Mapping[int, str] | None = None
) -> ProviderRequest:
    """The request a provider call sends (and a fault's prompt snapshot records): ``inp``'s
    messages, the offloaded earlier ones replaced by their whole texts (``history``, by
    position), the last one by ``full_message`` when the user message was offloaded."""
    messages = list(inp.messages)
    for position, text in (history or {}).items():
        messages[position] = messages[position].model_copy(update={"content": text})
    if full_message is not None and messages[-1].role == "user":  # a tool loop ends with its results
        messages[-1] = ChatMessage(role="user", content=full_message)
    return ProviderRequest(
        provider=inp.provider,
        model=inp.model,
        messages=messages,
        max_tokens=inp.max_tokens,
        temperature=inp.temperature,
        tools=[ToolDefinition.model_validate(tool) for tool in inp.tools],
        options=inp.options,
    )


def _verdict(text: str, rules: SafetyRules | None) -> SafetyVerdict | None:
    """The output safety verdict over the whole answer (None: no rules to check)."""
    if rules is None or not rules.rules or not text:
        return None
    return check_output(text, rules)


def tool_call_record(call: ToolCallChunk) -> dict[str, Any]:
    """``{id, name, arguments}`` with decoded arguments; undecodable ones also keep
    ``arguments_raw`` (the text as the model sent it) and get ``arguments: {}``."""
    arguments = call.parsed_arguments()
    if arguments is None:
        return {"id": call.id, "name": call.name, "arguments": {}, "arguments_raw": call.arguments}
    return {"id": call.id, "name": call.name, "arguments": arguments}


def _application_error(exc: ProviderError) -> ApplicationError:
    delay = timedelta(seconds=exc.retry_after_s) if exc.retry_after_s else None
    return ApplicationError(
        exc.message,
        {"status_code": exc.status_code, "code": exc.type},
        type=exc.type,
        non_retryable=not exc.retryable,
        next_retry_delay=delay,
    )
