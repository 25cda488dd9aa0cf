"""Read endpoints on large ledgers (not a test: a measurement).

For each backend (SQLite, PostgreSQL) and each size (default 100,000 and 1,000,000 turns, ~3
events each) it builds a ledger with :func:`bench.verify.build_ledger` (the thread summary is
maintained by every append, as in production), times the migration that backfills the summary
on the finished ledger (the summary tables dropped, then the upgrade), starts `turngate dev` on
the ledger and times every read endpoint the web UI and DBL-style clients use (p50/p95 over
repeated calls, a different thread or page each call). It also times single-event appends with
and without the summary maintained (interleaved rounds on the same ledger).

    .venv/bin/python bench/reads.py                                   # both sizes, both backends
    .venv/bin/python bench/reads.py --turns 100000 --backends sqlite
    .venv/bin/python bench/reads.py --turns 2000 --calls 5            # a quick look
    .venv/bin/python bench/reads.py --keep /var/tmp/reads             # keep (and reuse) ledgers
    .venv/bin/python bench/reads.py --report a.json b.json            # one table of several runs
    .venv/bin/python bench/reads.py --turns 100000 1000000 --grow-from 100000 --keep DIR
        # 1M = the built 100k ledger + 9 SQL copies of its events (bench/ledger_copies.py)

PostgreSQL: ``--pg-url`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``) names a
server and a database to connect to; the bench creates ``turngate_bench_reads_<turns>`` there
(another prefix: ``--pg-database-prefix``) and runs ``VACUUM ANALYZE`` after the bulk load
(what autovacuum does on its own later).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select, text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bench import stack
from bench.client import pct
from bench.ledger_copies import copy_events, thread_name, turn_name
from bench.stack import start_turngate
from bench.verify import build_ledger
from turngate.core.events import EventDraft, EventKind
from turngate.ledger import LedgerStore, summary
from turngate.ledger.engine import (
    migrate,
    migration_lock,
)
from turngate.ledger.schema import thread_summary

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_PG_PREFIX = "turngate_bench_reads"
TARGET_P50_MS = 50.0
FLAT_RATIO = 1.5
BACKFILL_TARGET_S = 60.0
APPEND_GROWTH = 0.10
TAIL_DEADLINE_S = 20.0
STARTUP_TIMEOUT_S = 300.0


# --------------------------------------------------------------------------- ledgers


def _pg_database(pg_url: str, prefix: str, turns: int, *, fresh: bool, template: int | None = None) -> str:
    """A database of its own per size on the server of ``pg_url`` (a copy of the ``template``
    size's, if given); its URL."""
    import psycopg

    url = make_url(pg_url).set(drivername="postgresql+psycopg")
    name = _pg_name(prefix, turns)
    admin = psycopg.connect(
        host=url.host, port=url.port or 5432, user=url.username, password=url.password, dbname=url.database
    )
    admin.autocommit = True
    try:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists and fresh:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        if not exists or fresh:
            like = f' TEMPLATE "{_pg_name(prefix, template)}"' if template is not None else ""
            admin.execute(f'CREATE DATABASE "{name}"{like}')
    finally:
        admin.close()
    return url.set(database=name).render_as_string(hide_password=False)


def _pg_name(prefix: str, turns: int) -> str:
    return f"{prefix}_{turns}"


def ledger_url(
    backend: str,
    turns: int,
    workdir: Path,
    pg_url: str,
    *,
    fresh: bool,
    template: int | None = None,
    pg_prefix: str = DEFAULT_PG_PREFIX,
) -> str:
    """The ledger of this size (fresh: emptied; template: a copy of that size's ledger)."""
    if backend == "postgresql":
        return _pg_database(pg_url, pg_prefix, turns, fresh=fresh, template=template)
    path = workdir / f"ledger-{turns}.sqlite3"
    if fresh:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    if template is not None and not path.exists():
        with (
            sqlite3.connect(workdir / f"ledger-{template}.sqlite3") as source,
            sqlite3.connect(path) as target,
        ):
            source.backup(target)
    return f"sqlite:///{path.as_posix()}"


def grow(url: str, copies: int) -> dict[str, Any]:
    """The copied smaller ledger grown ``copies``-fold (see :mod:`bench.ledger_copies`), unless
    that was done before (a kept ledger)."""
    with LedgerStore(url) as store:
        if store.snapshot(thread_id=thread_name(1, 1), limit=1)[0]:  # "thread-00000~1": copied
            return {"build_s": None, "events": store.head()[0], "reused": True}
        started = time.perf_counter()
        events = copy_events(store, copies)
        return {"build_s": None, "copy_s": round(time.perf_counter() - started, 1), "events": events}


def build(url: str, turns: int) -> dict[str, Any]:
    """The ledger (summary maintained by every append), unless it already holds ``turns`` turns."""
    with LedgerStore(url) as store:
        length = store.head()[0]
        if length:
            return {"build_s": None, "events": length, "reused": True}
        started = time.perf_counter()
        built = build_ledger(store, turns, chunk_turns=1000)
        return {"build_s": round(time.perf_counter() - started, 1), "events": built.events, "reused": False}


def _alembic(store: LedgerStore, action: str, revision: str) -> None:
    with store.engine.connect() as conn, migration_lock(conn):
        migrate(conn, revision, downgrade=action == "downgrade")


def backfill(url: str) -> float:
    """Seconds the summary migration takes on this ledger (its tables dropped first)."""
    with LedgerStore(url) as store:
        _alembic(store, "downgrade", "0005")
        if store.dialect == "postgresql":
            _vacuum(store)  # a settled ledger (rows just bulk-copied would first get hint bits)
        started = time.perf_counter()
        _alembic(store, "upgrade", "head")
        seconds = time.perf_counter() - started
        if store.dialect == "postgresql":
            _vacuum(store)
        return round(seconds, 1)


def _vacuum(store: LedgerStore) -> None:
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))


# --------------------------------------------------------------------------- appends


def _events_only(conn: Any, event_rows: Any, _recorded: Any, _known_actors: Any = None) -> None:
    summary.insert_events(conn, event_rows)


def append_latency(url: str, rounds: int, per_round: int) -> dict[str, Any]:
    """Single-event appends (as the turn's ledger activity makes them), ``rounds * per_round``
    with the summary maintained and as many with it switched off (:func:`summary.insert_events`
    in place of :func:`summary.write_appended`), alternating append by append (the order
    swapped each round) so that drift in the machine's speed falls on both alike; median ms
    each."""
    maintained = summary.write_appended
    timings: dict[str, list[float]] = {"with_summary": [], "without_summary": []}
    salt = f"{time.time_ns():x}"
    with LedgerStore(url) as store:
        try:
            for r in range(rounds):
                for k in range(per_round):
                    pair = ("with_summary", "without_summary")
                    for mode in pair if (r + k) % 2 == 0 else pair[::-1]:
                        summary.write_appended = maintained if mode == "with_summary" else _events_only
                        cid = f"append-{salt}-{r}-{mode}-{k}"
                        draft = EventDraft(
                            kind=EventKind.INTENT,
                            thread_id=f"append-thread-{k % 10}",
                            turn_id=cid,
                            correlation_id=cid,
                            payload={"message": "x" * 200},
                        )
                        started = time.perf_counter()
                        store.append(draft)
                        timings[mode].append((time.perf_counter() - started) * 1000)
        finally:
            summary.write_appended = maintained
    with_ms, without_ms = (statistics.median(timings[m]) for m in ("with_summary", "without_summary"))
    return {
        "with_summary_ms": round(with_ms, 2),
        "without_summary_ms": round(without_ms, 2),
        "growth": round(with_ms / without_ms - 1, 3),
        "n": len(timings["with_summary"]),
    }


# --------------------------------------------------------------------------- reads

Request = Callable[[int], tuple[str, dict[str, Any]]]


def _requests(length: int, turns: int, base_turns: int, recency: list[int]) -> dict[str, Request]:
    """Endpoint label -> (path, params) for call number k (another thread or page per call).
    ``recency``: the threads' last indexes, newest first (a deep ``before`` is one of them, at
    least 10 % deep and with a full page after it, so each size serves a full page)."""
    rng = random.Random(7)
    threads, base_threads = max(1, turns // 10), max(1, base_turns // 10)
    thread = lambda k: thread_name(base_threads, rng.randrange(threads))  # noqa: E731
    turn = lambda k: turn_name(base_turns, rng.randrange(turns))  # noqa: E731
    deep = lambda k: max(0, length - 100 - rng.randrange(1000))  # noqa: E731
    return {
        "/healthz": lambda k: ("/healthz", {}),
        "/status": lambda k: ("/status", {}),
        "/capabilities": lambda k: ("/capabilities", {}),
        "/snapshot first page": lambda k: ("/snapshot", {"limit": 100}),
        "/snapshot deep offset": lambda k: ("/snapshot", {"limit": 100, "offset": deep(k)}),
        "/snapshot middle offset": lambda k: ("/snapshot", {"limit": 100, "offset": rng.randrange(length)}),
        "/snapshot ?thread_id": lambda k: ("/snapshot", {"limit": 100, "thread_id": thread(k)}),
        "/snapshot ?stream_id&lane": lambda k: (
            "/snapshot",
            {"limit": 100, "stream_id": "default", "lane": "user_chat", "offset": rng.randrange(1000)},
        ),
        "/snapshot ?stream_id&lane deep offset": lambda k: (
            "/snapshot",
            {"limit": 100, "stream_id": "default", "lane": "user_chat", "offset": deep(k)},
        ),
        "/tail backlog 20": lambda k: ("/tail", {"backlog": 20}),
        "/tail ?since (resume, 20 events)": lambda k: ("/tail", {"since": length - 21, "backlog": 20}),
        "/ui/api/config": lambda k: ("/ui/api/config", {}),
        "/ui/api/threads": lambda k: ("/ui/api/threads", {"limit": 50}),
        "/ui/api/threads ?before (deep)": lambda k: (
            "/ui/api/threads",
            {
                "limit": 50,
                "before": recency[
                    rng.randrange(len(recency) // 10, max(len(recency) // 10 + 1, len(recency) - 50))
                ],
            },
        ),
        "/ui/api/threads ?q": lambda k: (
            "/ui/api/threads",
            {"limit": 50, "q": thread(k)},
        ),
        "/ui/api/threads ?decision=DENY": lambda k: ("/ui/api/threads", {"limit": 50, "decision": "DENY"}),
        "/ui/api/threads ?since": lambda k: (
            "/ui/api/threads",
            {"limit": 50, "since": "2020-01-01T00:00:00Z"},
        ),
        "/ui/api/turns": lambda k: ("/ui/api/turns", {"thread_id": thread(k), "limit": 50}),
        "/ui/api/turn": lambda k: ("/ui/api/turn", {"correlation_id": turn(k)}),
        "/verify ?thread_id (linear in the thread)": lambda k: ("/verify", {"thread_id": thread(k)}),
    }


def _tail_ms(http: httpx.Client, params: dict[str, Any]) -> float:
    """A /tail subscriber until the backlog's last event has arrived (the SSE stream then stays
    open, so it is closed here)."""
    started = time.perf_counter()
    seen = 0
    with http.stream("GET", "/tail", params=params) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("event: envelope"):
                seen += 1
                if seen == params["backlog"]:
                    break
            if time.perf_counter() - started > TAIL_DEADLINE_S:  # pings (every 15 s) get us here
                raise RuntimeError(f"/tail {params}: {seen} events in {TAIL_DEADLINE_S} s")
    return (time.perf_counter() - started) * 1000


def time_reads(
    base_url: str,
    headers: dict[str, str],
    length: int,
    turns: int,
    base_turns: int,
    calls: int,
    recency: list[int],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with httpx.Client(base_url=base_url, headers=headers, timeout=120) as http:
        for label, request in _requests(length, turns, base_turns, recency).items():
            samples: list[float] = []
            for k in range(calls + 2):  # two warm-up calls
                path, params = request(k)
                if path == "/tail":
                    ms = _tail_ms(http, params)
                else:
                    started = time.perf_counter()
                    response = http.get(path, params=params)
                    ms = (time.perf_counter() - started) * 1000
                    if response.status_code != 200:
                        raise RuntimeError(f"{label}: {response.status_code} {response.text[:300]}")
                if k >= 2:
                    samples.append(ms)
            out[label] = {"p50": pct(samples, 50), "p95": pct(samples, 95), "n": len(samples)}
    return out


async def serve_and_time(url: str, length: int, turns: int, base_turns: int, calls: int) -> dict[str, Any]:
    # a large ledger on a busy machine: `turngate dev` (Temporal dev server, migrations) can
    # take longer than the suite's default to answer /healthz
    stack.STARTUP_TIMEOUT_S = max(stack.STARTUP_TIMEOUT_S, STARTUP_TIMEOUT_S)
    # keyless from loopback: `turngate dev`'s unscoped local caller (the ledger has no tenants;
    # the dev key would be tenant "dev" and see nothing)
    recency = _thread_recency(url)
    async with start_turngate({"TURNGATE_LEDGER_URL": url}) as target:
        return await asyncio.to_thread(time_reads, target.url, {}, length, turns, base_turns, calls, recency)


def _thread_recency(url: str) -> list[int]:
    """The threads' last indexes, most recently active first (from the thread summary)."""
    with LedgerStore(url) as store, store.read_connection() as conn:
        rows = conn.execute(select(thread_summary.c.last_index).order_by(thread_summary.c.last_index.desc()))
        return [int(index) for (index,) in rows]


# --------------------------------------------------------------------------- report


def _built(data: dict[str, Any]) -> str:
    if data.get("copy_s") is not None:
        return f"{data['copy_s']} (SQL copies)"
    return "reused" if data["build_s"] is None else str(data["build_s"])


def _cell(reads: dict[str, Any], label: str) -> str:
    figures = reads.get(label)
    return "-" if figures is None else f"{figures['p50']:.1f} / {figures['p95']:.1f}"


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _append_ms(appends: dict[str, Any]) -> str:
    return f"{appends['with_summary_ms']:.2f} / {appends['without_summary_ms']:.2f}"


def evaluate(results: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    """Lines naming each target and PASS / MISS."""
    lines: list[str] = []
    for backend, sizes in results.items():
        ordered = sorted(sizes)
        big, small = ordered[-1], ordered[0]
        for label, figures in sizes[big]["reads"].items():
            if label.startswith("/verify"):
                continue
            ok = figures["p50"] <= TARGET_P50_MS
            lines.append(
                f"{backend:10} {big:>9} turns  {label:42} p50 {figures['p50']:7.1f} ms  {_verdict(ok)}"
            )
            if big != small and label in sizes[small]["reads"]:
                ratio = figures["p50"] / max(sizes[small]["reads"][label]["p50"], 0.1)
                flat = ratio <= FLAT_RATIO or figures["p50"] <= 5.0  # below 5 ms the ratio is noise
                lines.append(f"{backend:10} {big:>9} vs {small} {label:34} x{ratio:5.2f}  {_verdict(flat)}")
        for size in ordered:
            data = sizes[size]
            lines.append(
                f"{backend:10} {size:>9} turns  summary backfill {data['backfill_s']:.1f} s  "
                f"{_verdict(data['backfill_s'] <= BACKFILL_TARGET_S)}"
            )
            appends = data["append"]
            lines.append(
                f"{backend:10} {size:>9} turns  append with/without summary {_append_ms(appends)} ms "
                f"({appends['growth']:+.1%})  {_verdict(appends['growth'] <= APPEND_GROWTH)}"
            )
    return lines


def table(results: dict[str, dict[int, dict[str, Any]]]) -> str:
    """Markdown: one row per endpoint, p50 / p95 per backend and size."""
    columns = [(backend, size) for backend, sizes in results.items() for size in sorted(sizes)]
    header = "| endpoint | " + " | ".join(f"{b} {s:,} turns p50 / p95 ms" for b, s in columns) + " |"
    rule = "|---|" + "---:|" * len(columns)
    labels = list(dict.fromkeys(label for b, s in columns for label in results[b][s]["reads"]))
    rows = [
        f"| {label} | " + " | ".join(_cell(results[b][s]["reads"], label) for b, s in columns) + " |"
        for label in labels
    ]
    extra = [
        "| ledger events | " + " | ".join(f"{results[b][s]['events']:,}" for b, s in columns) + " |",
        "| build (s, summary maintained) | " + " | ".join(_built(results[b][s]) for b, s in columns) + " |",
        "| summary backfill (s) | "
        + " | ".join(f"{results[b][s]['backfill_s']:.1f}" for b, s in columns)
        + " |",
        "| append p50 with / without summary (ms) | "
        + " | ".join(_append_ms(results[b][s]["append"]) for b, s in columns)
        + " |",
    ]
    return "\n".join([header, rule, *rows, *extra])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--backends", default="sqlite,postgresql", help="comma-separated: sqlite,postgresql")
    parser.add_argument(
        "--calls", type=int, default=30, help="timed calls per endpoint (after 2 warm-up calls)"
    )
    parser.add_argument(
        "--append-rounds", type=int, default=10, help="interleaved append rounds (x 20 appends)"
    )
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument(
        "--pg-database-prefix",
        default=DEFAULT_PG_PREFIX,
        help="PostgreSQL databases are named PREFIX_<turns> (created on the --pg-url server)",
    )
    parser.add_argument(
        "--grow-from",
        type=int,
        metavar="TURNS",
        help="make larger sizes from this (built) size by SQL copies of its events (bench/ledger_copies.py)",
    )
    parser.add_argument("--keep", help="build the SQLite ledgers here and reuse ledgers already built")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--report", nargs="+", help="measure nothing: print the table of these --json files")
    args = parser.parse_args(argv)
    if args.report:
        merged: dict[str, dict[int, dict[str, Any]]] = {}
        for name in args.report:
            for backend, sizes in json.loads(Path(name).read_text()).items():
                merged.setdefault(backend, {}).update({int(size): data for size, data in sizes.items()})
        print(table(merged))
        print()
        print("\n".join(evaluate(merged)))
        return 0
    workdir = Path(args.keep or "/tmp/turngate-bench-reads")
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[int, dict[str, Any]]] = {}
    for backend in args.backends.split(","):
        for turns in args.turns:
            grown = args.grow_from is not None and turns > args.grow_from
            template = args.grow_from if grown else None
            url = ledger_url(
                backend,
                turns,
                workdir,
                args.pg_url,
                fresh=not args.keep,
                template=template,
                pg_prefix=args.pg_database_prefix,
            )
            print(f"[{backend} {turns:,} turns] building ...", file=sys.stderr, flush=True)
            data = grow(url, turns // args.grow_from) if grown else build(url, turns)
            data["backfill_s"] = backfill(url)
            print(f"[{backend} {turns:,} turns] {data}; timing reads ...", file=sys.stderr, flush=True)
            base_turns = args.grow_from if grown else turns
            data["reads"] = asyncio.run(serve_and_time(url, data["events"], turns, base_turns, args.calls))
            data["append"] = append_latency(url, args.append_rounds, 20)
            results.setdefault(backend, {})[turns] = data
            print(json.dumps({backend: {turns: data}}), file=sys.stderr, flush=True)
    print(table(results))
    print()
    print("\n".join(evaluate(results)))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
