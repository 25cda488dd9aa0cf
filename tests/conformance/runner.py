"""Runs conformance cases against a gateway over HTTP and reduces each answer to what the wire
contract promises: status, field names and JSON types, the values a case names as contractual,
the kinds and order of a turn's events, SSE ids. Timestamps, digests and generated ids are never
kept. Used by ``record.py`` (against the published DBL gateway) and ``test_corpus.py`` (against
turngate), so both sides are reduced by the same code.

Placeholders in a case's request: ``{run}`` inside a string becomes a token unique to the run
(so ids never collide with an earlier run on the same ledger; answers get it back as ``{run}``);
a string that is exactly ``{index:NAME}`` becomes the integer ``index`` the case NAME was
answered with.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

TERMINAL_WAIT_S = 20.0


@dataclass
class Run:
    """One pass over the corpus: the run token and what earlier cases answered."""

    token: str
    indexes: dict[str, int] = field(default_factory=dict)

    def fill(self, value: Any) -> Any:
        if isinstance(value, str):
            if value.startswith("{index:") and value.endswith("}"):
                return self.indexes[value[len("{index:") : -1]]
            return value.replace("{run}", self.token)
        if isinstance(value, list):
            return [self.fill(item) for item in value]
        if isinstance(value, dict):
            return {key: self.fill(item) for key, item in value.items()}
        return value

    def unfill(self, value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(self.token, "{run}")
        if isinstance(value, list):
            return [self.unfill(item) for item in value]
        if isinstance(value, dict):
            return {key: self.unfill(item) for key, item in value.items()}
        return value


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


_MISSING = object()


def type_of(found: Any, path: str) -> str | list[str] | None:
    """The JSON type at ``path``; over a ``[]`` projection, the sorted set of the items' types."""
    if found is _MISSING:
        return None
    if "[]" in path and isinstance(found, list):
        return sorted({json_type(item) for item in found})
    return json_type(found)


def pick(document: Any, path: str) -> Any:
    """The value at a dotted ``path``; ``name[]`` maps the rest of the path over a list."""
    head, _, rest = path.partition(".")
    if head.endswith("[]"):
        items = document.get(head[:-2], _MISSING) if isinstance(document, Mapping) else _MISSING
        if not isinstance(items, list):
            return _MISSING
        picked = [pick(item, rest) if rest else item for item in items]
        return [None if item is _MISSING else item for item in picked]
    value = document.get(head, _MISSING) if isinstance(document, Mapping) else _MISSING
    if value is _MISSING or not rest:
        return value
    return pick(value, rest)


def reduce_json(document: Any, case: Mapping[str, Any], run: Run) -> dict[str, Any]:
    """Top-level field types (and those of ``types`` paths), and the values of ``values`` paths."""
    reduced: dict[str, Any] = {}
    if isinstance(document, Mapping):
        reduced["fields"] = {key: json_type(value) for key, value in sorted(document.items())}
    for path in case.get("types", []):
        found = pick(document, path)
        reduced.setdefault("types", {})[path] = type_of(found, path)
    for path in case.get("values", []):
        found = pick(document, path)
        reduced.setdefault("values", {})[path] = None if found is _MISSING else run.unfill(found)
    return reduced


async def _sse(
    http: httpx.AsyncClient, request: Mapping[str, Any], take: int
) -> tuple[int, list[dict[str, Any]]]:
    """The first ``take`` SSE messages of a GET (or fewer after 5 s without one)."""
    messages: list[dict[str, Any]] = []
    async with http.stream(
        "GET", request["path"], params=request.get("params"), headers=request.get("headers")
    ) as response:
        if response.status_code != 200:
            await response.aread()
            return response.status_code, []
        current: dict[str, Any] = {}
        lines = response.aiter_lines()
        while len(messages) < take:
            try:
                line = await asyncio.wait_for(anext(lines), 5)
            except (TimeoutError, StopAsyncIteration):
                break
            if not line:
                if "data" in current:
                    messages.append(current)
                current = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                current[name] = value.removeprefix(" ")
        return response.status_code, messages


async def _turn_events(http: httpx.AsyncClient, correlation_id: str, first: int) -> list[dict[str, Any]]:
    """The events of one turn from ``/snapshot`` once it ended: an EXECUTION, or a DENY."""
    deadline = time.monotonic() + TERMINAL_WAIT_S
    while True:
        page = (await http.get("/snapshot", params={"offset": first, "limit": 200})).json()
        events = [e for e in page["events"] if e.get("correlation_id") == correlation_id]
        kinds = [e["kind"] for e in events]
        denied = any(e["kind"] == "DECISION" and e["payload"].get("decision") == "DENY" for e in events)
        if "EXECUTION" in kinds or denied or time.monotonic() > deadline:
            return events
        await asyncio.sleep(0.05)


def reduce_events(events: list[dict[str, Any]], case: Mapping[str, Any], run: Run) -> list[dict[str, Any]]:
    """Each event's kind, then the payload values and types the case names for that kind."""
    reduced = []
    for event in events:
        entry: dict[str, Any] = {"kind": event["kind"]}
        payload = event.get("payload") or {}
        for path in case.get("event_values", {}).get(event["kind"], []):
            found = pick(payload, path)
            entry[path] = None if found is _MISSING else run.unfill(found)
        for path in case.get("event_types", {}).get(event["kind"], []):
            found = pick(payload, path)
            entry[f"{path}:type"] = type_of(found, path)
        reduced.append(entry)
    return reduced


async def observe(
    http: httpx.AsyncClient, case: Mapping[str, Any], run: Run, headers: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Send ``case``'s request (with ``headers`` added); what came back, reduced to the contract."""
    request = run.fill(case["request"])
    sent = {name: str(value) for name, value in (request.get("headers") or {}).items()}
    request["headers"] = {**(headers or {}), **sent}
    if case.get("sse"):
        status, messages = await _sse(http, request, case["sse"]["take"])
        base = run.fill(case["sse"]["base"]) if "base" in case["sse"] else 0
        return {
            "status": status,
            "sse": {
                "ids": [int(m["id"]) - base if "id" in m else None for m in messages],
                "event": sorted({m.get("event", "message") for m in messages}),
                "data_fields": sorted({k for m in messages for k in json.loads(m["data"])}),
            },
        }
    kwargs: dict[str, Any] = {"params": request.get("params"), "headers": request.get("headers")}
    if "json" in request:
        kwargs["json"] = request["json"]
    elif "content" in request:
        kwargs["content"] = request["content"].encode()
        kwargs["headers"] = {"content-type": "application/json", **(request.get("headers") or {})}
    response = await http.request(request["method"], request["path"], **kwargs)
    observed: dict[str, Any] = {"status": response.status_code}
    try:
        body = response.json()
    except ValueError:
        observed["body"] = "not json"
        return observed
    observed["body"] = reduce_json(body, case, run)
    if isinstance(body, Mapping) and isinstance(body.get("index"), int):
        run.indexes[case["name"]] = body["index"]
    if case.get("turn") and response.status_code == 202:
        events = await _turn_events(http, request["json"]["correlation_id"], body["index"])
        observed["events"] = reduce_events(events, case, run)
        first = {e["kind"]: e["index"] for e in reversed(events)}
        for kind, index in first.items():
            run.indexes[f"{case['name']}.{kind}"] = index
    return observed
