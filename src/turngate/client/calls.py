"""The requests of the native API, built once for the sync and the async client (pure)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

Wait = Literal["decision", "execution"]
#: Job states after which nothing changes (mirrors the server's; importing it pulls in workers).
FINAL_JOB_STATES: frozenset[str] = frozenset({"completed", "failed", "cancelled", "timed_out"})
#: The SSE events that end one turn's stream.
TURN_STREAM_END: frozenset[str] = frozenset({"done", "redact", "error"})


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"params": self.params, "headers": self.headers}
        if self.json is not None:
            out["json"] = self.json
        if self.content is not None:
            out["content"] = self.content
        return out


def new_correlation_id() -> str:
    return f"c-{uuid.uuid4().hex[:16]}"


def intent_envelope(
    message: str,
    *,
    correlation_id: str | None = None,
    thread_id: str | None = None,
    turn_id: str | None = None,
    parent_turn_id: str | None = None,
    refs: Sequence[str | dict[str, Any]] = (),
    model: str | None = None,
    inputs: dict[str, Any] | None = None,
    actor: str = "user",
    intent_type: str = "chat.message",
) -> dict[str, Any]:
    """A ``chat.message`` envelope (interface_version 3). ``refs``: correlation ids (that turn:
    its INTENT and, once recorded, its EXECUTION), ``execution:<id>`` (its EXECUTION alone), event
    digests (exactly that event), or ref objects."""
    cid = correlation_id or new_correlation_id()
    payload: dict[str, Any] = {
        "intent_type": intent_type,
        "actor": actor,
        "thread_id": thread_id or cid,
        "turn_id": turn_id or cid,
        "declared_refs": [declared_ref(ref) for ref in refs],
        "inputs": dict(inputs or {}),
        "payload": {"message": message},
    }
    if parent_turn_id:
        payload["parent_turn_id"] = parent_turn_id
    if model:
        payload["requested_model_id"] = model
    return {"interface_version": 3, "correlation_id": cid, "payload": payload}


def declared_ref(ref: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(ref, dict):
        return ref
    if ref.startswith("execution:"):
        return {"ref_type": "execution", "ref_id": ref.removeprefix("execution:")}
    return {"ref_type": "event", "ref_id": ref}


def send_intent(envelope: dict[str, Any], wait: Wait | None = None, *, stream: bool = False) -> Call:
    params: dict[str, Any] = {"wait": wait} if wait else {}
    if stream:
        params["stream"] = "true"
    return Call("POST", "/ingress/intent", params=params, json=envelope)


def snapshot(
    *,
    offset: int = 0,
    limit: int = 100,
    thread_id: str | None = None,
    stream_id: str | None = None,
    lane: str | None = None,
) -> Call:
    params = {"offset": offset, "limit": limit, "thread_id": thread_id, "stream_id": stream_id, "lane": lane}
    return Call("GET", "/snapshot", params={k: v for k, v in params.items() if v is not None})


def tail(
    *,
    since: int | None,
    backlog: int | None,
    stream_id: str | None,
    lanes: Sequence[str] | None,
    last_event_id: str | None,
) -> Call:
    params: dict[str, Any] = {"since": since, "backlog": backlog, "stream_id": stream_id}
    if lanes:
        params["lanes"] = ",".join(lanes)
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    return Call("GET", "/tail", params={k: v for k, v in params.items() if v is not None}, headers=headers)


def turn_stream(correlation_id: str, last_event_id: str | None = None) -> Call:
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    return Call("GET", f"/turns/{quote(correlation_id, safe='')}/stream", headers=headers)


def verify(*, thread_id: str | None = None, since: int | None = None, until: int | None = None) -> Call:
    params = {"thread_id": thread_id, "since": since, "until": until}
    return Call("GET", "/verify", params={k: v for k, v in params.items() if v is not None})


def submit_job(intent_type: str, payload: dict[str, Any], correlation_id: str | None = None) -> Call:
    envelope = {
        "interface_version": 3,
        "correlation_id": correlation_id or new_correlation_id(),
        "payload": {"intent_type": intent_type, "payload": payload},
    }
    return Call("POST", "/ingress/intent", json=envelope)


def job(job_id: str) -> Call:
    return Call("GET", f"/jobs/{quote(job_id, safe='')}")


def list_jobs(job_type: str | None = None, open_only: bool = False, limit: int = 50) -> Call:
    params: dict[str, Any] = {"limit": limit}
    if job_type:
        params["type"] = job_type
    if open_only:
        params["open"] = "true"
    return Call("GET", "/jobs", params=params)


def cancel_job(job_id: str) -> Call:
    return Call("DELETE", f"/jobs/{quote(job_id, safe='')}")


def case(case_id: str) -> Call:
    return Call("GET", f"/cases/{quote(case_id, safe='')}")


def upload(data: bytes, *, name: str | None = None, media_type: str | None = None) -> Call:
    params = {"name": name} if name else {}
    return Call(
        "POST",
        "/artifacts",
        params=params,
        content=data,
        headers={"Content-Type": media_type or "application/octet-stream"},
    )


def get(path: str) -> Call:
    return Call("GET", path)


def reviews() -> Call:
    return Call("GET", "/reviews")


def review(correlation_id: str) -> Call:
    return Call("GET", f"/reviews/{quote(correlation_id, safe='')}")


def decide_review(
    correlation_id: str, verdict: Literal["approve", "deny"], comment: str | None = None
) -> Call:
    body = {"comment": comment} if comment else {}
    return Call("POST", f"/reviews/{quote(correlation_id, safe='')}/{verdict}", json=body)
