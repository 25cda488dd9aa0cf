"""Helpers of the partition tests: an in-process worker and API that reach the ledger or Temporal
by different roads (one of them through a :class:`PartitionProxy`), and the checks every fault
test ends with."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from tests.stack import Stack, api_server, make_settings
from turngate.ledger import LedgerStore, verify_ledger
from turngate.settings import Settings


def twin_settings(data_dir: Path, temporal_address: str, **shared: Any) -> Callable[..., Settings]:
    """Settings for the two sides of one deployment: the same queues, prefix and port, each side
    with its own changes (``side(ledger_url=..., temporal_address=...)``)."""
    base = make_settings(data_dir, temporal_address, **shared)
    common = {
        "turns_task_queue": base.turns_task_queue,
        "llm_task_queue": base.llm_task_queue,
        "workflow_id_prefix": base.workflow_id_prefix,
        "job_queue_prefix": base.job_queue_prefix,
        "port": base.port,
        **shared,
    }

    def side(**changes: Any) -> Settings:
        values = {**common, **changes}
        return make_settings(data_dir, values.pop("temporal_address", temporal_address), **values)

    return side


@contextlib.asynccontextmanager
async def split_stack(api: Settings, worker: Settings) -> AsyncIterator[Stack]:
    """The worker with ``worker``'s settings and the API with ``api``'s, in this process."""
    from turngate.worker.run import running_worker

    async with running_worker(worker), api_server(api) as http:
        yield Stack(api, http)


async def until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


def outcome(store: LedgerStore, correlation_id: str) -> str | None:
    """How a turn ended: ``EXECUTION`` (answered), ``SYSTEM_ERROR`` (or another error code of its
    EXECUTION or DENY), ``DENY`` (a policy's); None while it has not ended."""
    events = {str(e.kind): e for e in store.by_correlation(correlation_id)}
    decision, execution = events.get("DECISION"), events.get("EXECUTION")
    if execution is not None:
        error = execution.payload.get("error") or {}
        return str(error.get("code")) if error else "EXECUTION"
    if decision is not None and decision.payload.get("decision") == "DENY":
        codes = decision.payload.get("reason_codes") or []
        return "SYSTEM_ERROR" if "SYSTEM_ERROR" in codes else "DENY"
    return None


def outcomes(store: LedgerStore, correlation_ids: list[str]) -> Counter[str]:
    return Counter(outcome(store, c) or "not ended" for c in correlation_ids)


def duplicates(store: LedgerStore) -> list[tuple[str, str]]:
    """(correlation_id, kind) recorded more than once: must stay empty."""
    _, events = store.snapshot(limit=100_000)
    seen = Counter((e.correlation_id, str(e.kind)) for e in events)
    return [key for key, n in seen.items() if n > 1]


def ended_once(store: LedgerStore, correlation_ids: list[str]) -> bool:
    """Every turn ended, and no kind of event is recorded twice for any of them."""
    for correlation_id in correlation_ids:
        kinds = [str(e.kind) for e in store.by_correlation(correlation_id)]
        if len(kinds) != len(set(kinds)) or outcome(store, correlation_id) is None:
            return False
    return True


def verified(store: LedgerStore) -> bool:
    return verify_ledger(store).ok
