"""Token streaming benchmark: a provider's deltas through the token bus to an SSE client.

Pipeline measured, per run:

    fake provider (N tokens, I ms apart)
      -> ProviderActivities.call_provider (the real activity, in ActivityEnvironment)
      -> token bus (SQLite file by default, or --bus redis://...)
      -> GET /turns/{id}/stream (the real router, on uvicorn)
      -> SSE client (httpx)

The publisher (provider + activity, "the worker") runs in a separate process by default
(``--mode process``; ``--mode task`` runs it as a task in the API's process). After the activity
returns, the publisher appends the EXECUTION to the ledger as the workflow would, which ends the
SSE stream with ``done``. API, SSE client and ledger watcher share the parent process.

Reported (p50 / p95 over --runs):

- first token: provider yields its first delta -> the client receives the first ``token`` event
- added time: client receives the last ``token`` minus the provider yielding its last delta, as
  a share of the provider's own stream duration (first -> last delta)
- done: provider's last delta -> client receives ``done`` (includes the activity's final flush,
  the EXECUTION append and the API's ledger poll)

Usage: python bench/streaming.py [--runs 20] [--tokens 200] [--interval-ms 5] [--bus URL]
                                 [--mode process|task]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from turngate.activities.provider import ProviderActivities
from turngate.api import stream
from turngate.api.state import ApiState
from turngate.api.watcher import LedgerWatcher
from turngate.cli import _uvicorn_server
from turngate.core.events import EventDraft, EventKind, parse_intent
from turngate.devserver import free_port
from turngate.ledger import LedgerStore
from turngate.providers.base import ProviderRequest, StreamChunk, Usage
from turngate.settings import load_settings
from turngate.streaming import TokenBus, open_token_bus
from turngate.workflows.shared import ProviderCallInput

# --------------------------------------------------------------------------- publisher side


class PacedProvider:
    """Yields ``tokens`` deltas ``interval_s`` apart and records when the first and last left."""

    name = "bench"
    models: tuple[str, ...] = ("bench-1",)

    def __init__(self, tokens: int, interval_s: float) -> None:
        self.tokens = tokens
        self.interval_s = interval_s
        self.first = 0.0
        self.last = 0.0

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamChunk]:
        for i in range(self.tokens):
            if i:
                await asyncio.sleep(self.interval_s)
            now = time.time()
            if i == 0:
                self.first = now
            self.last = now
            yield StreamChunk(text=f"t{i} ")
        yield StreamChunk(usage=Usage(input_tokens=1, output_tokens=self.tokens))

    async def aclose(self) -> None:
        return None


async def publish_turn(bus: TokenBus, store: LedgerStore, cid: str, tokens: int, interval_s: float) -> dict:
    from temporalio.testing import ActivityEnvironment

    provider = PacedProvider(tokens, interval_s)
    activities = ProviderActivities({"bench": provider}, bus)
    call = ProviderCallInput(
        correlation_id=cid, provider="bench", model="bench-1", messages=[{"role": "user", "content": "go"}]
    )
    result = await ActivityEnvironment().run(activities.call_provider, call)
    returned = time.time()
    intent = (await asyncio.to_thread(store.by_correlation, cid))[0]
    fields = intent.model_dump(include=set(EventDraft.model_fields) - {"kind", "payload"})
    payload = {"provider": "bench", "output_text": result.output_text, "exchanges_count": 1}
    await asyncio.to_thread(store.append, EventDraft(kind=EventKind.EXECUTION, payload=payload, **fields))
    return {"provider_first": provider.first, "provider_last": provider.last, "returned": returned}


async def child(bus_url: str, ledger_url: str, tokens: int, interval_s: float) -> None:
    """The worker stand-in: one line per turn on stdin (its correlation id), one JSON line out."""
    bus = open_token_bus(bus_url)
    store = LedgerStore(ledger_url)
    loop = asyncio.get_running_loop()
    try:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line.strip():
                return
            timings = await publish_turn(bus, store, line.strip(), tokens, interval_s)
            print(json.dumps(timings), flush=True)
    finally:
        await bus.aclose()
        store.close()


# --------------------------------------------------------------------------- API + client side


async def read_sse(http: httpx.AsyncClient, cid: str, connected: asyncio.Event) -> dict:
    marks: dict[str, Any] = {"tokens": 0, "text": []}
    async with http.stream("GET", f"/turns/{cid}/stream") as resp:
        resp.raise_for_status()
        connected.set()
        event = ""
        async for line in resp.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event:
                now = time.time()
                data = json.loads(line[5:].strip())
                if event == "token":
                    marks.setdefault("first_token", now)
                    marks["last_token"] = now
                    marks["tokens"] += 1
                    marks["text"].append(data["text"])
                elif event == "reset":
                    marks["text"].clear()
                elif event in ("done", "redact"):
                    marks["done"] = now
                    return marks
    return marks


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


async def main(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="turngate-bench-stream-"))
    bus_url = args.bus or f"sqlite:///{(workdir / 'stream.sqlite3').as_posix()}"
    settings = load_settings(data_dir=workdir, port=free_port(), wait_timeout_s=10)
    store = LedgerStore(settings.effective_ledger_url)
    watcher = LedgerWatcher(store)
    watcher.start()
    api_bus = open_token_bus(bus_url)
    app = FastAPI()
    app.include_router(stream.router)
    app.state.turngate = ApiState(settings, None, store, watcher, None)  # type: ignore[arg-type]
    app.state.token_bus = api_bus
    server = _uvicorn_server(app, settings.host, settings.port)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)

    interval_s = args.interval_ms / 1000
    proc: asyncio.subprocess.Process | None = None
    task_bus: TokenBus | None = None
    if args.mode == "process":
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--child",
            bus_url,
            settings.effective_ledger_url,
            str(args.tokens),
            str(interval_s),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
    else:
        task_bus = api_bus if bus_url.startswith("memory:") else open_token_bus(bus_url)

    async def run_publisher(cid: str) -> dict:
        if proc is not None:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(f"{cid}\n".encode())
            await proc.stdin.drain()
            return json.loads(await proc.stdout.readline())
        assert task_bus is not None
        return await publish_turn(task_bus, store, cid, args.tokens, interval_s)

    rows: list[dict[str, float]] = []
    try:
        async with httpx.AsyncClient(base_url=f"http://{settings.host}:{settings.port}", timeout=30) as http:
            for i in range(args.runs + args.warmup):
                cid = f"bench-{uuid.uuid4().hex[:10]}"
                intent = store.append(
                    parse_intent(
                        {
                            "interface_version": 3,
                            "correlation_id": cid,
                            "payload": {"intent_type": "chat.message", "payload": {"message": "go"}},
                        }
                    ).draft()
                )
                fields = intent.model_dump(include=set(EventDraft.model_fields) - {"kind", "payload"})
                store.append(
                    EventDraft(
                        kind=EventKind.DECISION, payload={"decision": "ALLOW", "reason_codes": []}, **fields
                    )
                )
                connected = asyncio.Event()
                client = asyncio.create_task(read_sse(http, cid, connected))
                await connected.wait()
                await asyncio.sleep(0.05)  # the SSE generator subscribes before the provider starts
                pub = await run_publisher(cid)
                marks = await asyncio.wait_for(client, 30)
                if marks["tokens"] < args.tokens or "".join(marks["text"]) != "".join(
                    f"t{n} " for n in range(args.tokens)
                ):
                    print(f"run {i}: client got {marks['tokens']} tokens / wrong text", file=sys.stderr)
                    return 1
                if i < args.warmup:
                    continue
                duration = pub["provider_last"] - pub["provider_first"]
                added = marks["last_token"] - pub["provider_last"]
                rows.append(
                    {
                        "first_ms": (marks["first_token"] - pub["provider_first"]) * 1000,
                        "duration_ms": duration * 1000,
                        "added_ms": added * 1000,
                        "added_pct": added / duration * 100,
                        "done_ms": (marks["done"] - pub["provider_last"]) * 1000,
                    }
                )
    finally:
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
            await proc.wait()
        if task_bus is not None and task_bus is not api_bus:
            await task_bus.aclose()
        server.should_exit = True
        await serving
        await api_bus.aclose()
        await watcher.stop()
        store.close()

    def line(name: str, key: str, unit: str) -> str:
        values = [r[key] for r in rows]
        return (
            f"{name:<28} p50 {pct(values, 50):8.1f} {unit}   p95 {pct(values, 95):8.1f} {unit}   "
            f"max {max(values):8.1f} {unit}"
        )

    scheme = bus_url.split(":", 1)[0]
    print(
        f"token streaming: {args.tokens} tokens, {args.interval_ms:g} ms apart, bus={scheme}, "
        f"publisher={'separate process' if args.mode == 'process' else 'task in the API process'}, "
        f"runs={args.runs} (+{args.warmup} warm-up)"
    )
    print(line("provider stream duration", "duration_ms", "ms"))
    print(line("first token (provider->SSE)", "first_ms", "ms"))
    print(line("added at the end", "added_ms", "ms"))
    print(line("added time / duration", "added_pct", "% "))
    print(line("done after last token", "done_ms", "ms"))
    first_p50 = statistics.median(r["first_ms"] for r in rows)
    added_p50 = statistics.median(r["added_pct"] for r in rows)
    ok = first_p50 <= 50 and added_p50 <= 10
    print(f"targets (first token p50 <= 50 ms, added time <= 10%): {'met' if ok else 'NOT met'}")
    if args.json:
        print(json.dumps({"bus": scheme, "mode": args.mode, "rows": rows}))
    return 0 if ok else 2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="See docs/STREAMING.md.")
    parser.add_argument("--runs", type=int, default=20, help="measured runs (default 20)")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured runs first (default 2)")
    parser.add_argument("--tokens", type=int, default=200, help="tokens per answer (default 200)")
    parser.add_argument(
        "--interval-ms", type=float, default=5.0, help="provider's gap between tokens (default 5)"
    )
    parser.add_argument(
        "--bus",
        default=None,
        help="token bus URL (default: a fresh sqlite file; e.g. redis://127.0.0.1:6379/0)",
    )
    parser.add_argument(
        "--mode",
        choices=["process", "task"],
        default="process",
        help="publisher in a separate process (default) or as a task in the API's process",
    )
    parser.add_argument("--json", action="store_true", help="also print every run as JSON")
    return parser.parse_args(argv)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, bus_url, ledger_url, n, interval = sys.argv
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(child(bus_url, ledger_url, int(n), float(interval)))
        sys.exit(0)
    sys.exit(asyncio.run(main(parse_args())))
