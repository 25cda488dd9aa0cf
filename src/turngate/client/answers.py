"""Typed answers of the native API (unknown fields are kept: newer servers add some)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from turngate.core.events import Event
from turngate.core.manifest import ArtifactPointer


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class TurnReceipt(_Answer):
    """``POST /ingress/intent``'s 202: the turn's ids and, with ``wait``, its events."""

    accepted: bool
    stream_id: str
    thread_id: str
    turn_id: str
    correlation_id: str
    index: int | None = None
    queued: bool = False
    workflow_id: str
    deduplicated: bool = False
    wait_timed_out: bool | None = None
    decision: Event | None = None
    execution: Event | None = None
    #: The wait ended while the turn waits for a reviewer (docs/REVIEWS.md): ``review`` says
    #: what it waits for (reason codes, role, deadline); its DECISION comes with the verdict.
    review_pending: bool = False
    review: dict[str, Any] | None = None

    @property
    def allowed(self) -> bool | None:
        return None if self.decision is None else self.decision.payload.get("decision") == "ALLOW"

    @property
    def reason_codes(self) -> list[str]:
        return list(self.decision.payload.get("reason_codes", [])) if self.decision else []

    @property
    def output_text(self) -> str | None:
        if self.execution is None:
            return None
        text = self.execution.payload.get("output_text")
        return text if isinstance(text, str) else None


class SnapshotPage(_Answer):
    length: int
    offset: int
    limit: int
    v_digest: str | None = None
    events: list[Event]


class StreamEvent(_Answer):
    """One SSE message: ``event`` (``token``, ``done``, ``envelope``, ...), its JSON ``data``
    and ``id`` (the resume position)."""

    event: str
    data: dict[str, Any]
    id: str | None = None

    @classmethod
    def parse(cls, event: str, data: str, event_id: str | None) -> StreamEvent:
        parsed = json.loads(data) if data else {}
        return cls(
            event=event or "message",
            data=parsed if isinstance(parsed, dict) else {"value": parsed},
            id=event_id or None,
        )


class VerifyReport(_Answer):
    ok: bool


class JobReceipt(_Answer):
    job_id: str
    status_url: str | None = None


class Job(_Answer):
    """``GET /jobs/{id}``: ``id``, ``type``, ``state``, progress, timings, ``error``."""

    id: str
    type: str
    state: str


class UploadedArtifact(_Answer):
    artifact: ArtifactPointer


__all__ = [
    "ArtifactPointer",
    "Event",
    "Job",
    "JobReceipt",
    "SnapshotPage",
    "StreamEvent",
    "TurnReceipt",
    "UploadedArtifact",
    "VerifyReport",
]
