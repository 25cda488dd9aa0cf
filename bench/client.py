"""What every scenario needs as a client: intents, a /tail clock, percentiles."""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx


def new_correlation_id(prefix: str = "b") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def intent(
    message: str,
    thread: str,
    *,
    correlation_id: str | None = None,
    refs: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    inner: dict[str, Any] = {
        "intent_type": "chat.message",
        "thread_id": thread,
        "payload": {"message": message},
    }
    if refs:
        inner["declared_refs"] = refs
    return {
        "interface_version": 3,
        "correlation_id": correlation_id or new_correlation_id(),
        "payload": inner,
    }


def refs_to(*correlation_ids: str) -> list[dict[str, str]]:
    """Refs to earlier turns: each turn's INTENT and its EXECUTION."""
    out: list[dict[str, str]] = []
    for cid in correlation_ids:
        out += [{"ref_id": cid}, {"ref_type": "execution", "ref_id": cid}]
    return out


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))], 1)


def distribution(values: list[float]) -> dict[str, float | int | None]:
    return {
        "n": len(values),
        "p50": pct(values, 50),
        "p95": pct(values, 95),
        "p99": pct(values, 99),
        "mean": round(statistics.fmean(values), 1) if values else None,
    }


class TailClock:
    """One open /tail connection that notes when each turn's EXECUTION (or DENY) becomes visible."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url, self.headers = url, headers
        self.finished: dict[str, float] = {}
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        async with (
            httpx.AsyncClient(timeout=None, headers=self.headers) as http,
            http.stream("GET", f"{self.url}/tail", params={"backlog": 0}) as resp,
        ):
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[5:])
                if _ends_turn(event):
                    async with self._changed:
                        self.finished[event["correlation_id"]] = time.perf_counter()
                        self._changed.notify_all()

    async def wait(self, correlation_id: str, timeout_s: float = 60.0) -> float:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: correlation_id in self.finished), timeout_s)
        return self.finished[correlation_id]

    async def __aenter__(self) -> TailClock:
        self._task = asyncio.create_task(self._read())
        await asyncio.sleep(0.3)  # the connection is open before the first turn is sent
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await self._task


def _ends_turn(event: dict[str, Any]) -> bool:
    if event.get("kind") == "EXECUTION":
        return True
    # a turn not allowed to execute ends with its DECISION
    return event.get("kind") == "DECISION" and event.get("payload", {}).get("decision") != "ALLOW"


async def ledger_events(http: httpx.AsyncClient, page: int = 1000) -> AsyncIterator[dict[str, Any]]:
    """Every event in the ledger, by pages of /snapshot."""
    offset = 0
    while True:
        resp = await http.get("/snapshot", params={"offset": offset, "limit": page})
        resp.raise_for_status()
        body = resp.json()
        for event in body["events"]:
            yield event
        offset += len(body["events"])
        if not body["events"] or offset >= body["length"]:
            return
