"""``Turngate``: the native API from plain (blocking) code (httpx); the same methods as
:class:`~turngate.client.async_client.AsyncTurngate`."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
from httpx_sse import connect_sse

from turngate.client import calls
from turngate.client.calls import FINAL_JOB_STATES, TURN_STREAM_END, Call, Wait
from turngate.client.errors import TurngateError, Unreachable, error_from
from turngate.client.models import (
    ArtifactPointer,
    Event,
    Job,
    JobReceipt,
    SnapshotPage,
    StreamEvent,
    TurnReceipt,
    VerifyReport,
)
from turngate.client.settings import ClientSettings, stream_timeout


class Turngate:
    """``with Turngate("http://127.0.0.1:8010", api_key=...) as tg: ...``

    Every refusal raises :class:`TurngateError` (with ``reason_code``); no answer at all raises
    :class:`Unreachable`.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.settings = ClientSettings.resolve(url, api_key, timeout_s)
        self._http = httpx.Client(
            base_url=self.settings.url,
            headers=self.settings.headers(),
            timeout=self.settings.timeout_s,
            transport=transport,
        )

    def __enter__(self) -> Turngate:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def call(self, call: Call) -> Any:
        """The JSON answer of one request built by :mod:`turngate.client.calls`, untyped (for
        callers that pass the API's answer on as it is)."""
        return self._json(call)

    def _json(self, call: Call) -> Any:
        try:
            response = self._http.request(call.method, call.path, **call.kwargs())
        except httpx.HTTPError as exc:
            raise Unreachable(self.settings.url, exc) from exc
        if response.status_code >= 400:
            raise error_from(response)
        try:
            return response.json()
        except ValueError as exc:
            raise TurngateError(response.status_code, "http.bad_body", response.text[:200]) from exc

    def _sse(self, call: Call) -> Iterator[StreamEvent]:
        try:
            with connect_sse(
                self._http, call.method, call.path, timeout=stream_timeout(self.settings), **call.kwargs()
            ) as source:
                if source.response.status_code >= 400:
                    source.response.read()
                    raise error_from(source.response)
                for message in source.iter_sse():
                    yield StreamEvent.parse(message.event, message.data, message.id)
        except httpx.HTTPError as exc:
            raise Unreachable(self.settings.url, exc) from exc

    # ------------------------------------------------------------------ turns

    def send_intent(self, envelope: dict[str, Any], *, wait: Wait | None = None) -> TurnReceipt:
        """``POST /ingress/intent``; ``wait`` blocks until the DECISION or EXECUTION (bounded)."""
        return TurnReceipt.model_validate(self._json(calls.send_intent(envelope, wait)))

    def chat(self, message: str, *, wait: Wait | None = "execution", **envelope: Any) -> TurnReceipt:
        """One ``chat.message`` turn (see :func:`turngate.client.calls.intent_envelope`)."""
        return self.send_intent(calls.intent_envelope(message, **envelope), wait=wait)

    def stream_intent(self, envelope: dict[str, Any]) -> Iterator[StreamEvent]:
        """Send an intent and stream its answer: ``token`` ... then ``done`` or ``redact``."""
        for event in self._sse(calls.send_intent(envelope, stream=True)):
            yield event
            if event.event in TURN_STREAM_END:
                return

    def stream_turn(self, correlation_id: str, *, last_event_id: str | None = None) -> Iterator[StreamEvent]:
        """A turn's answer as it is produced (``GET /turns/{id}/stream``), at any time."""
        for event in self._sse(calls.turn_stream(correlation_id, last_event_id)):
            yield event
            if event.event in TURN_STREAM_END:
                return

    # ------------------------------------------------------------------ the ledger

    def snapshot(self, **query: Any) -> SnapshotPage:
        """One page of ``/snapshot`` (``offset``, ``limit``, ``thread_id``, ``stream_id``, ``lane``)."""
        return SnapshotPage.model_validate(self._json(calls.snapshot(**query)))

    def iter_events(self, *, page_size: int = 500, **query: Any) -> Iterator[Event]:
        """Every event of ``/snapshot`` matching ``query``, page by page (no cap)."""
        offset = 0
        while True:
            page = self.snapshot(offset=offset, limit=page_size, **query)
            yield from page.events
            offset += len(page.events)
            if not page.events or offset >= page.length:
                return

    def tail(
        self,
        *,
        since: int | None = None,
        backlog: int | None = None,
        stream_id: str | None = None,
        lanes: Sequence[str] | None = None,
        reconnect_delay_s: float = 1.0,
        max_reconnects: int | None = None,
    ) -> Iterator[Event]:
        """Live events from ``/tail``. A dropped connection is resumed after the last event
        received (``Last-Event-ID``), so nothing is skipped or repeated; after
        ``max_reconnects`` failed attempts in a row (None: never give up) :class:`Unreachable`
        is raised. A refusal (401, 403, 429) is raised at once."""
        last_id: str | None = None
        failures = 0
        while True:
            call = calls.tail(
                since=since, backlog=backlog, stream_id=stream_id, lanes=lanes, last_event_id=last_id
            )
            try:
                for message in self._sse(call):
                    if message.event != "envelope":
                        continue
                    failures = 0
                    last_id = message.id or last_id
                    yield Event.model_validate(message.data)
            except Unreachable:
                failures += 1
                if max_reconnects is not None and failures > max_reconnects:
                    raise
            time.sleep(reconnect_delay_s)

    def verify(self, **query: Any) -> VerifyReport:
        """``/verify`` of a thread (``thread_id``) or a range (``since``, ``until``)."""
        return VerifyReport.model_validate(self._json(calls.verify(**query)))

    def capabilities(self) -> dict[str, Any]:
        return dict(self._json(calls.get("/capabilities")))

    # ------------------------------------------------------------------ case jobs

    def upload(
        self, data: bytes | Path, *, name: str | None = None, media_type: str | None = None
    ) -> ArtifactPointer:
        """Store a document for ``case.ingest`` (``POST /artifacts``); returns its pointer."""
        if isinstance(data, Path):
            name, data = name or data.name, data.read_bytes()
        body = self._json(calls.upload(data, name=name, media_type=media_type))
        return ArtifactPointer.model_validate(body["artifact"])

    def submit_job(
        self, intent_type: str, payload: dict[str, Any], *, correlation_id: str | None = None
    ) -> JobReceipt:
        return JobReceipt.model_validate(self._json(calls.submit_job(intent_type, payload, correlation_id)))

    def job(self, job_id: str) -> Job:
        return Job.model_validate(self._json(calls.job(job_id)))

    def jobs(self, *, job_type: str | None = None, open_only: bool = False, limit: int = 50) -> list[Job]:
        body = self._json(calls.list_jobs(job_type, open_only, limit))
        return [Job.model_validate(job) for job in body["jobs"]]

    def cancel_job(self, job_id: str) -> dict[str, Any]:
        return dict(self._json(calls.cancel_job(job_id)))

    def watch_job(self, job_id: str, *, poll_s: float = 0.5) -> Iterator[Job]:
        """The job's status each time it changes, ending with its final state."""
        seen: Job | None = None
        while True:
            job = self.job(job_id)
            if job != seen:
                yield job
                seen = job
            if job.state in FINAL_JOB_STATES:
                return
            time.sleep(poll_s)

    def case(self, case_id: str) -> dict[str, Any]:
        return dict(self._json(calls.case(case_id)))
