"""The fault soak: six clients send turns without pause while every fault of docs/RELIABILITY.md
is injected in turn, for the long durations (30 s and 3 min) the test suite cannot afford.

    python -m bench.faults              # the soak (about 12 minutes; root and PostgreSQL needed)
    python -m bench.faults --short      # every fault for a few seconds: checks the soak works

One turngate (worker and API in this process, on a Temporal dev server of its own) whose every
road goes through a :class:`~tests.faults.partition_proxy.PartitionProxy`: worker and API to
PostgreSQL, worker and API to Temporal; its artifact store on a small tmpfs. A second turngate
on a SQLite ledger on a small tmpfs takes the full ledger disk. Clients retry a refused intent
(503 with Retry-After) under the same correlation id, as a client should. At the end, with every
fault healed, each acknowledged turn must end exactly once; the report prints turns
acknowledged, faults injected, turns ended per outcome, duplicates (must be 0) and verify.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url
from tests.faults.full_disk import fill, small_tmpfs
from tests.faults.partition_proxy import PartitionProxy
from tests.faults.partitions import duplicates, outcome, split_stack, twin_settings
from tests.ledger import postgres
from tests.stack import envelope

from bench.stack import temporal_dev_server
from turngate.devserver import DevServer, free_port
from turngate.ledger import LedgerStore, verify_ledger

CLIENTS = 6
LONG_S = (30.0, 180.0)
SHORT_S = 30.0
QUICK_S = 4.0
SETTLE_S = 10.0
END_WAIT_S = 300.0
DISK_MIB = 16


@dataclass
class Tally:
    acknowledged: set[str] = field(default_factory=set)
    acknowledged_unrecorded: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    transport_errors: int = 0
    faults: list[dict[str, Any]] = field(default_factory=list)
    #: What was going on when each turn was acknowledged (a fault, or the calm after one).
    window: str = "before any fault"
    acknowledged_in: dict[str, str] = field(default_factory=dict)


@dataclass
class Fault:
    name: str
    hold_s: float
    inject: Callable[[], None]
    heal: Callable[[], None]


async def _client(n: int, http: httpx.AsyncClient, stop: asyncio.Event, tally: Tally, tag: str) -> None:
    """Turns one after another; a refused one is resent (same correlation id) after Retry-After."""
    i = 0
    while not stop.is_set():
        correlation_id = f"{tag}-{n}-{i}"
        body = envelope(f"soak {n} {i}", correlation_id=correlation_id, thread_id=f"{tag}-t-{n}-{i}")
        i += 1
        while not stop.is_set():
            try:
                resp = await http.post("/ingress/intent", json=body, timeout=60)
            except httpx.HTTPError:
                tally.transport_errors += 1
                await asyncio.sleep(1)
                continue
            code = resp.json().get("reason_code") if resp.status_code != 202 else None
            tally.statuses[f"{resp.status_code} {code}" if code else str(resp.status_code)] += 1
            if resp.status_code == 202:
                tally.acknowledged.add(correlation_id)
                tally.acknowledged_in[correlation_id] = tally.window
                tally.acknowledged_unrecorded += resp.json().get("index") is None
                break
            if resp.status_code in (429, 503):
                await asyncio.sleep(float(resp.headers.get("retry-after", "1")))
                continue
            break  # any other answer: not acknowledged, not retried (counted in statuses)
        await asyncio.sleep(0.05)


async def _healthz(url: str) -> str:
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            resp = await http.get(url)
        return "ok" if resp.status_code == 200 else str(resp.json().get("reason_code"))
    except httpx.HTTPError as exc:
        return type(exc).__name__


async def _run_faults(
    http: httpx.AsyncClient, faults: list[Fault], tally: Tally, tag: str, health: dict[str, str]
) -> None:
    stop = asyncio.Event()
    clients = [asyncio.create_task(_client(n, http, stop, tally, tag)) for n in range(CLIENTS)]
    try:
        await asyncio.sleep(SETTLE_S)
        for fault in faults:
            print(f"  {fault.name}: {fault.hold_s:.0f} s ...", flush=True)
            before = len(tally.acknowledged)
            started = time.monotonic()
            fault.inject()
            tally.window = fault.name
            seen: Counter[str] = Counter()
            while time.monotonic() - started < fault.hold_s:
                for where, url in health.items():
                    seen[f"{where} {await _healthz(url)}"] += 1
                await asyncio.sleep(min(2.0, fault.hold_s / 4))
            fault.heal()
            tally.window = f"after {fault.name}"
            held_s, during = time.monotonic() - started, len(tally.acknowledged) - before
            await asyncio.sleep(SETTLE_S)
            tally.faults.append(
                {
                    "fault": fault.name,
                    "held_s": round(held_s, 1),
                    "acknowledged_during": during,
                    "acknowledged_in_the_next_10_s": len(tally.acknowledged) - before - during,
                    "healthz_seen": dict(seen),
                }
            )
    finally:
        stop.set()
        await asyncio.gather(*clients)


async def _ended(store: LedgerStore, acknowledged: set[str], timeout_s: float) -> dict[str, str]:
    """Each acknowledged turn's outcome, once all have ended or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        ends = await asyncio.to_thread(lambda: {c: outcome(store, c) or "not ended" for c in acknowledged})
        if "not ended" not in ends.values() or time.monotonic() > deadline:
            return ends
        await asyncio.sleep(2)


def _report(store: LedgerStore, tally: Tally, outcomes: dict[str, str]) -> dict[str, Any]:
    ends = Counter(outcomes.values())
    by_window: dict[str, Counter[str]] = {}
    for correlation_id, ended in outcomes.items():
        by_window.setdefault(tally.acknowledged_in[correlation_id], Counter())[ended] += 1
    return {
        "turns_acknowledged": len(tally.acknowledged),
        "acknowledged_before_their_intent_was_recorded": tally.acknowledged_unrecorded,
        "faults_injected": len(tally.faults),
        "faults": tally.faults,
        "answers": dict(tally.statuses),
        "transport_errors": tally.transport_errors,
        "turns_ended": dict(ends),
        "turns_ended_by_when_acknowledged": {w: dict(c) for w, c in by_window.items()},
        "duplicates": len(duplicates(store)),
        "verify_ok": verify_ledger(store).ok,
    }


@contextlib.contextmanager
def _proxy(address: tuple[str, int]) -> Any:
    proxy = PartitionProxy(address)
    try:
        yield proxy
    finally:
        proxy.close()


async def _postgres_deployment(root: Path, temporal: DevServer, quick: bool) -> dict[str, Any]:
    """Worker and API on PostgreSQL and Temporal through proxies, artifacts on a tmpfs."""
    server = postgres.acquire()
    if isinstance(server, str):
        raise SystemExit(f"the soak needs PostgreSQL: {server}")
    host, port = temporal.address.rsplit(":", 1)
    with (
        server.fresh_database() as url,
        small_tmpfs(root / "artifacts", DISK_MIB) as artifacts,
        _proxy((make_url(url).host or "127.0.0.1", make_url(url).port or 5432)) as worker_pg,
        _proxy((make_url(url).host or "127.0.0.1", make_url(url).port or 5432)) as api_pg,
        _proxy((host, int(port))) as worker_temporal,
        _proxy((host, int(port))) as api_temporal,
    ):
        bind = f"127.0.0.1:{free_port()}"
        side = twin_settings(
            root,
            temporal.address,
            echo_delay_ms=20,
            artifacts=str(artifacts),
            artifact_deadline_s=5.0,
            ledger_timeout_s=5.0,
            temporal_rpc_timeout_s=2.0,
            turn_queue_max=1000,
            rate_limit_per_s=1_000_000,
            rate_limit_burst=1_000_000,
        )
        api = side(ledger_url=api_pg.route(url), temporal_address=api_temporal.address)
        worker = side(
            ledger_url=worker_pg.route(url),
            temporal_address=worker_temporal.address,
            worker_metrics_bind=bind,
        )
        filler: list[Path] = []

        def fill_disk() -> None:
            filler.append(fill(artifacts))

        def free_disk() -> None:
            filler.pop().unlink()

        long_s = (QUICK_S, QUICK_S) if quick else LONG_S
        short_s = QUICK_S if quick else SHORT_S

        def cut(name: str, proxy: PartitionProxy, hold_s: float) -> Fault:
            return Fault(f"{name} partition {hold_s:.0f} s", hold_s, proxy.freeze, proxy.heal)

        faults = [
            *(cut("worker <-> ledger", worker_pg, s) for s in long_s),
            *(cut("worker <-> Temporal", worker_temporal, s) for s in long_s),
            cut("API <-> Temporal", api_temporal, short_s),
            cut("API <-> ledger", api_pg, short_s),
            Fault(f"full artifact disk {short_s:.0f} s", short_s, fill_disk, free_disk),
        ]
        tally = Tally()
        health = {"api": f"http://127.0.0.1:{api.port}/healthz", "worker": f"http://{bind}/healthz"}
        async with split_stack(api, worker) as stack:
            await _run_faults(stack.http, faults, tally, "pg", health)
            with LedgerStore(url) as store:
                ends = await _ended(store, tally.acknowledged, END_WAIT_S)
                return _report(store, tally, ends)


async def _sqlite_deployment(root: Path, temporal: DevServer, quick: bool) -> dict[str, Any]:
    """A turngate on a SQLite ledger on a tmpfs that fills up."""
    with small_tmpfs(root / "ledger-disk", DISK_MIB) as disk:
        ledger_url = f"sqlite:///{disk}/ledger.sqlite3"
        side = twin_settings(
            root / "sqlite",
            temporal.address,
            echo_delay_ms=20,
            ledger_url=ledger_url,
            ledger_min_free_bytes=1 << 20,
            turn_queue_max=1000,
            rate_limit_per_s=1_000_000,
            rate_limit_burst=1_000_000,
        )
        settings = side()
        filler: list[Path] = []
        hold = QUICK_S if quick else SHORT_S
        fault = Fault(
            f"full ledger disk {hold:.0f} s",
            hold,
            lambda: filler.append(fill(disk)),
            lambda: filler.pop().unlink(),
        )
        tally = Tally()
        async with split_stack(settings, settings) as stack:
            await _run_faults(
                stack.http, [fault], tally, "sq", {"api": f"http://127.0.0.1:{settings.port}/healthz"}
            )
            with LedgerStore(ledger_url) as store:
                ends = await _ended(store, tally.acknowledged, END_WAIT_S)
                report = _report(store, tally, ends)
                with store.engine.connect() as conn:
                    report["sqlite_integrity"] = conn.exec_driver_sql("PRAGMA integrity_check").scalar()
                return report


async def soak(quick: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="turngate-faults-") as tmp:
        root = Path(tmp)
        async with temporal_dev_server(root, persistent=True) as temporal:
            print("PostgreSQL deployment: partitions and a full artifact disk", flush=True)
            pg = await _guarded(_postgres_deployment(root / "pg", temporal, quick))
            print("SQLite deployment: a full ledger disk", flush=True)
            sq = await _guarded(_sqlite_deployment(root / "sq", temporal, quick))
    return {"postgresql": pg, "sqlite": sq}


async def _guarded(run: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    try:
        return await run
    except pytest.skip.Exception as exc:  # no root for the tmpfs: said loudly, not hidden
        print(f"SKIPPED: {exc}", flush=True)
        return {"skipped": str(exc)}


def summary(results: dict[str, Any]) -> list[str]:
    lines = []
    for name, report in results.items():
        if "skipped" in report:
            lines.append(f"{name}: skipped ({report['skipped']})")
            continue
        ended = ", ".join(f"{k} {v}" for k, v in sorted(report["turns_ended"].items()))
        lines.append(
            f"{name}: turns acknowledged {report['turns_acknowledged']}, faults injected "
            f"{report['faults_injected']}, turns ended: {ended}; duplicates {report['duplicates']}, "
            f"verify {'ok' if report['verify_ok'] else 'FAILED'}"
            + (f", integrity {report['sqlite_integrity']}" if "sqlite_integrity" in report else "")
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__)
    parser.add_argument("--short", action="store_true", help=f"each fault for {QUICK_S:.0f} s")
    parser.add_argument("--json", type=Path, help="write the full report here")
    args = parser.parse_args(argv)
    results = asyncio.run(soak(args.short))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    for line in summary(results):
        print(line)
    bad = [
        r
        for r in results.values()
        if "skipped" not in r and (r["duplicates"] or not r["verify_ok"] or r["turns_ended"].get("not ended"))
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
