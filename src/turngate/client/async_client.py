"""``AsyncTurngate``: the native API from asyncio code (httpx)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx
from httpx_sse import aconnect_sse

from turngate.client import calls
from turngate.client.calls import FINAL_JOB_STATES, TURN_STREAM_END, Call, Wait
from turngate.client.request_errors import TurngateError, Unreachable, error_from
from turngate.client.settings import ClientSettings, stream_timeout

if TYPE_CHECKING:  # the typed answers are imported by the methods that return them (see __init__)
    from turngate.client.answers import (
        ArtifactPointer,
        Event,
        Job,
        JobReceipt,
        SnapshotPage,
        StreamEvent,
        TurnReceipt,
        VerifyReport,
    )


class AsyncTurngate:
    """``async with AsyncTurngate("http://127.0.0.1:8010", api_key=...) as tg: ...``

    Every refusal raises :class:`TurngateError` (with ``reason_code``); no answer at all raises
    :class:`Unreachable`.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = ClientSettings.resolve(url, api_key, timeout_s)
        self._http = httpx.AsyncClient(
            base_url=self.settings.url,
            headers=self.settings.headers(),
            timeout=self.settings.timeout_s,
            transport=transport,
        )

    async def __aenter__(self) -> AsyncTurngate:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def call(self, call: Call) -> Any:
        """The JSON answer of one request built by :mod:`turngate.client.calls`, untyped (for
        callers that pass the API's answer on as it is)."""
        return await self._json(call)

    async def _json(self, call: Call) -> Any:
        try:
            response = await self._http.request(call.method, call.path, **call.kwargs())
        except httpx.HTTPError as exc:
            raise Unreachable(self.settings.url, exc) from exc
        if response.status_code >= 400:
            raise error_from(response)
        try:
            return response.json()
        except ValueError as exc:
            raise TurngateError(response.status_code, "http.bad_body", response.text[:200]) from exc

    async def _sse(self, call: Call) -> AsyncIterator[StreamEvent]:
        from turngate.client.answers import StreamEvent

        try:
            async with aconnect_sse(
                self._http, call.method, call.path, timeout=stream_timeout(self.settings), **call.kwargs()
            ) as source:
                if source.response.status_code >= 400:
                    await source.response.aread()
                    raise error_from(source.response)
                async for message in source.aiter_sse():
                    yield StreamEvent.parse(message.event, message.data, message.id)
        except httpx.HTTPError as exc:
            raise Unreachable(self.settings.url, exc) from exc

    # ------------------------------------------------------------------ turns

    async def send_intent(self, envelope: dict[str, Any], *, wait: Wait | None = None) -> TurnReceipt:
        """``POST /ingress/intent``; ``wait`` blocks until the DECISION or EXECUTION (bounded)."""
        from turngate.client.answers import TurnReceipt

        return TurnReceipt.model_validate(await self._json(calls.send_intent(envelope, wait)))

    async def chat(self, /, message: str, *, wait: Wait | None = "execution", **envelope: Any) -> TurnReceipt:
        """One ``chat.message`` turn (see :func:`turngate.client.calls.intent_envelope`)."""
        return await self.send_intent(calls.intent_envelope(message, **envelope), wait=wait)

    async def stream_intent(self, envelope: dict[str, Any]) -> AsyncIterator[StreamEvent]:
        """Send an intent and stream its answer: ``token`` ... then ``done`` or ``redact``."""
        async for event in self._sse(calls.send_intent(envelope, stream=True)):
            yield event
            if event.event in TURN_STREAM_END:
                return

    async def stream_turn(
        self, correlation_id: str, *, last_event_id: str | None = None
    ) -> AsyncIterator[StreamEvent]:
        """A turn's answer as it is produced (``GET /turns/{id}/stream``), at any time."""
        async for event in self._sse(calls.turn_stream(correlation_id, last_event_id)):
            yield event
            if event.event in TURN_STREAM_END:
                return

    # ------------------------------------------------------------------ the ledger

    async def snapshot(self, /, **query: Any) -> SnapshotPage:
        """One page of ``/snapshot`` (``offset``, ``limit``, ``thread_id``, ``stream_id``, ``lane``)."""
        from turngate.client.answers import SnapshotPage

        return SnapshotPage.model_validate(await self._json(calls.snapshot(**query)))

    async def iter_events(self, /, *, page_size: int = 500, **query: Any) -> AsyncIterator[Event]:
        """Every event of ``/snapshot`` matching ``query``, page by page (no cap)."""
        offset = 0
        while True:
            page = await self.snapshot(offset=offset, limit=page_size, **query)
            for event in page.events:
                yield event
            offset += len(page.events)
            if not page.events or offset >= page.length:
                return

    async def tail(
        self,
        *,
        since: int | None = None,
        backlog: int | None = None,
        stream_id: str | None = None,
        lanes: Sequence[str] | None = None,
        reconnect_delay_s: float = 1.0,
        max_reconnects: int | None = None,
    ) -> AsyncIterator[Event]:
        """Live events from ``/tail``. A dropped connection is resumed after the last event
        received (``Last-Event-ID``), so nothing is skipped or repeated; after
        ``max_reconnects`` failed attempts in a row (None: never give up) :class:`Unreachable`
        is raised. A refusal (401, 403, 429) is raised at once."""
        from turngate.client.answers import Event

        last_id: str | None = None
        failures = 0
        while True:
            call = calls.tail(
                since=since, backlog=backlog, stream_id=stream_id, lanes=lanes, last_event_id=last_id
            )
            try:
                async for message in self._sse(call):
                    if message.event != "envelope":
                        continue
                    failures = 0
                    last_id = message.id or last_id
                    yield Event.model_validate(message.data)
            except Unreachable:
                failures += 1
                if max_reconnects is not None and failures > max_reconnects:
                    raise
            await asyncio.sleep(reconnect_delay_s)

    async def verify(self, /, **query: Any) -> VerifyReport:
        """``/verify`` of a thread (``thread_id``) or a range (``since``, ``until``)."""
        from turngate.client.answers import VerifyReport

        return VerifyReport.model_validate(await self._json(calls.verify(**query)))

    async def capabilities(self) -> dict[str, Any]:
        return dict(await self._json(calls.get("/capabilities")))

    # ------------------------------------------------------------------ human review

    async def reviews(self) -> list[dict[str, Any]]:
        """The turns of your tenant waiting for a reviewer (``GET /reviews``; the review role)."""
        return list((await self._json(calls.reviews()))["reviews"])

    async def review(self, correlation_id: str) -> dict[str, Any]:
        """One turn's review, pending or decided (``GET /reviews/{id}``)."""
        return dict(await self._json(calls.review(correlation_id)))

    async def approve(self, correlation_id: str, *, comment: str | None = None) -> dict[str, Any]:
        """Approve a turn waiting for review; it is recorded as ALLOW and goes on to its model."""
        return dict(await self._json(calls.decide_review(correlation_id, "approve", comment)))

    async def deny(self, correlation_id: str, *, comment: str | None = None) -> dict[str, Any]:
        """Deny a turn waiting for review; it is recorded as DENY ``review.denied``."""
        return dict(await self._json(calls.decide_review(correlation_id, "deny", comment)))

    # ------------------------------------------------------------------ case jobs

    async def upload(
        self, data: bytes | Path, *, name: str | None = None, media_type: str | None = None
    ) -> ArtifactPointer:
        """Store a document for ``case.ingest`` (``POST /artifacts``); returns its pointer."""
        from turngate.client.answers import ArtifactPointer

        if isinstance(data, Path):
            name, data = name or data.name, data.read_bytes()
        body = await self._json(calls.upload(data, name=name, media_type=media_type))
        return ArtifactPointer.model_validate(body["artifact"])

    async def submit_job(
        self, intent_type: str, payload: dict[str, Any], *, correlation_id: str | None = None
    ) -> JobReceipt:
        from turngate.client.answers import JobReceipt

        return JobReceipt.model_validate(
            await self._json(calls.submit_job(intent_type, payload, correlation_id))
        )

    async def job(self, job_id: str) -> Job:
        from turngate.client.answers import Job

        return Job.model_validate(await self._json(calls.job(job_id)))

    async def jobs(
        self, *, job_type: str | None = None, open_only: bool = False, limit: int = 50
    ) -> list[Job]:
        from turngate.client.answers import Job

        body = await self._json(calls.list_jobs(job_type, open_only, limit))
        return [Job.model_validate(job) for job in body["jobs"]]

    async def cancel_job(self, job_id: str) -> dict[str, Any]:
        return dict(await self._json(calls.cancel_job(job_id)))

    async def watch_job(self, job_id: str, *, poll_s: float = 0.5) -> AsyncIterator[Job]:
        """The job's status each time it changes, ending with its final state."""
        seen: Job | None = None
        while True:
            job = await self.job(job_id)
            if job != seen:
                yield job
                seen = job
            if job.state in FINAL_JOB_STATES:
                return
            await asyncio.sleep(poll_s)

    async def case(self, case_id: str) -> dict[str, Any]:
        return dict(await self._json(calls.case(case_id)))
