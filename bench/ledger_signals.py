"""The ledger's change signals, which the API's watcher (/tail, turn streams, waits) runs on.

Targets:

- ``change_marker()`` on a 2,000-event ledger: at most 2 ms a call (mean of 300 calls; the SQLite
  listener polls it every few milliseconds while a reader waits);
- ``change_listener()``: a waiting reader is woken at most 50 ms after another connection's
  append returns (median of 20 appends), never more than 0.5 s.

tests/ledger checks what the signals report; how fast is measured here. SQLite always (a fresh
file); PostgreSQL with --pg URL (LISTEN/NOTIFY; give it a database of its own, since NOTIFY
channels are per database and other writers there would wake the reader too).

    python bench/ledger_signals.py [--pg postgresql+psycopg://127.0.0.1:5432/bench] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/ledger_signals.py`

from turngate.core.events import EventDraft, EventKind
from turngate.ledger import LedgerStore

EVENTS = 2_000
MARKER_CALLS = 300
MARKER_TARGET_MS = 2.0
WAKE_ROUNDS = 20
WAKE_MEDIAN_TARGET_MS = 50.0
WAKE_MAX_TARGET_MS = 500.0
#: How long after a reader starts waiting the other connection appends.
APPEND_AFTER_S = 0.05


def draft(correlation_id: str) -> EventDraft:
    return EventDraft(
        kind=EventKind.INTENT,
        thread_id=f"thread-{correlation_id[-2:]}",
        turn_id=correlation_id,
        correlation_id=correlation_id,
        payload={"message": f"hello {correlation_id}"},
    )


def marker_ms(store: LedgerStore) -> float:
    """Mean milliseconds of one ``change_marker()`` call on a ledger of ``EVENTS`` events."""
    store.append_many([draft(f"m-{i:05d}") for i in range(EVENTS)])
    store.change_marker()  # its connection is opened once
    started = time.perf_counter()
    for _ in range(MARKER_CALLS):
        store.change_marker()
    return (time.perf_counter() - started) / MARKER_CALLS * 1000


def _append_later(writer: LedgerStore, correlation_id: str, committed: list[float]) -> None:
    """Append after ``APPEND_AFTER_S``; ``committed`` receives the time the append returned."""
    time.sleep(APPEND_AFTER_S)
    writer.append(draft(correlation_id))
    committed.append(time.perf_counter())


async def wake_ms(store: LedgerStore, writer: LedgerStore) -> list[float]:
    """Milliseconds from the writer's append returning to the waiting reader being woken (negative
    when the wake-up beats the writer's own return from its commit)."""
    latencies = []
    async with store.change_listener() as listener:
        await listener.wait(5)  # listening from now on
        for n in range(WAKE_ROUNDS):
            committed: list[float] = []
            thread = threading.Thread(target=_append_later, args=(writer, f"w-{n:03d}", committed))
            thread.start()
            if not await listener.wait(5):
                raise RuntimeError("the reader was not woken by an append within 5 s")
            woke = time.perf_counter()
            await asyncio.to_thread(thread.join)
            latencies.append((woke - committed[0]) * 1000)
    return latencies


async def measure(url: str) -> dict[str, Any]:
    with LedgerStore(url) as store, LedgerStore(url) as writer:
        per_call = marker_ms(store)
        wakes = await wake_ms(store, writer)
    median, worst = statistics.median(wakes), max(wakes)
    return {
        "change_marker_ms": round(per_call, 3),
        "wake_ms": {"median": round(median, 1), "max": round(worst, 1), "n": len(wakes)},
        "status": {
            "change_marker": "PASS" if per_call <= MARKER_TARGET_MS else "FAIL",
            "wake_median": "PASS" if median <= WAKE_MEDIAN_TARGET_MS else "FAIL",
            "wake_max": "PASS" if worst <= WAKE_MAX_TARGET_MS else "FAIL",
        },
    }


def render(results: dict[str, Any]) -> str:
    lines = [f"{'backend':<11} {'measured':<42} {'figure':<10} target      status"]
    for backend, figures in results.items():
        status = figures["status"]
        rows = [
            ("change_marker(), 2,000 events, per call", f"{figures['change_marker_ms']:.3f} ms",
             f"<= {MARKER_TARGET_MS:g} ms", status["change_marker"]),
            ("reader woken after an append, median", f"{figures['wake_ms']['median']:.1f} ms",
             f"<= {WAKE_MEDIAN_TARGET_MS:g} ms", status["wake_median"]),
            ("reader woken after an append, max", f"{figures['wake_ms']['max']:.1f} ms",
             f"<= {WAKE_MAX_TARGET_MS:g} ms", status["wake_max"]),
        ]  # fmt: skip
        lines += [f"{backend:<11} {what:<42} {value:<10} {goal:<11} {ok}" for what, value, goal, ok in rows]
    return "\n".join(lines)


async def run(pg_url: str | None) -> dict[str, Any]:
    results = {}
    with tempfile.TemporaryDirectory(prefix="turngate-bench-ledger-") as work:
        results["sqlite"] = await measure(f"sqlite:///{Path(work) / 'ledger.sqlite3'}")
    if pg_url:
        results["postgresql"] = await measure(pg_url)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pg", help="also on this PostgreSQL ledger (a database of its own)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    results = asyncio.run(run(args.pg))
    print(json.dumps(results, indent=2) if args.json else render(results))
    passed = all(ok == "PASS" for figures in results.values() for ok in figures["status"].values())
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
