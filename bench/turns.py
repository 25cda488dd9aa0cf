"""Turn latency and throughput, end to end over HTTP (not a test: a measurement).

Sequential: POST /ingress/intent, then time until that turn's EXECUTION arrives on one open
/tail SSE connection (every event is durable in Temporal and the ledger before /tail shows it).
Concurrent: C clients on different threads for D seconds, each POST ?wait=execution in a loop.

    .venv/bin/python bench/turns.py                  # starts its own `turngate dev` (echo provider)
    .venv/bin/python bench/turns.py --url http://127.0.0.1:8010   # against a running turngate
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from turngate.devserver import free_port


def envelope(message: str, thread: str) -> dict:
    cid = f"b-{uuid.uuid4().hex[:16]}"
    return {
        "interface_version": 3,
        "correlation_id": cid,
        "payload": {"intent_type": "chat.message", "thread_id": thread, "payload": {"message": message}},
    }


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def tree_rss_mb(pid: int) -> dict[str, float]:
    """RSS of a process and its children, by command name."""
    out: dict[str, float] = {}
    pids = [pid]
    with contextlib.suppress(OSError):
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            pids.append(int(child))
    for p in pids:
        with contextlib.suppress(OSError):
            name = Path(f"/proc/{p}/comm").read_text().strip()
            value = rss_mb(p)
            if value is not None:
                out[f"{name}[{p}]"] = round(value, 1)
    return out


@contextlib.asynccontextmanager
async def own_turngate(echo_delay_ms: int) -> AsyncIterator[tuple[str, subprocess.Popen[bytes]]]:
    data = Path(tempfile.mkdtemp(prefix="turngate-bench-"))
    port, tport, uport = free_port(), free_port(), free_port()
    env = dict(os.environ, TURNGATE_ECHO_DELAY_MS=str(echo_delay_ms), TURNGATE_LOG_LEVEL="WARNING")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "turngate",
            "dev",
            "--data-dir",
            str(data),
            "--port",
            str(port),
            "--temporal-port",
            str(tport),
            "--ui-port",
            str(uport),
        ],
        env=env,
        stdout=open(data / "dev.log", "wb"),  # noqa: SIM115 - the child owns it
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(300):
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{url}/healthz")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
            else:
                raise SystemExit(f"turngate did not come up; see {data / 'dev.log'}")
        yield url, proc
    finally:
        proc.send_signal(2)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(20)


async def sequential(url: str, n: int, warmup: int) -> list[float]:
    seen: dict[str, float] = {}
    arrived = asyncio.Event()

    async def tail() -> None:
        async with (
            httpx.AsyncClient(timeout=None) as http,
            http.stream("GET", f"{url}/tail", params={"backlog": 0}) as resp,
        ):
            async for line in resp.aiter_lines():
                if line.startswith("data:"):
                    event = json.loads(line[5:])
                    if event["kind"] == "EXECUTION":
                        seen[event["correlation_id"]] = time.perf_counter()
                        arrived.set()

    reader = asyncio.create_task(tail())
    await asyncio.sleep(0.3)
    latencies: list[float] = []
    async with httpx.AsyncClient(timeout=30) as http:
        for i in range(warmup + n):
            body = envelope("hello from the benchmark", f"seq-{uuid.uuid4().hex[:8]}")
            cid = body["correlation_id"]
            start = time.perf_counter()
            resp = await http.post(f"{url}/ingress/intent", json=body)
            resp.raise_for_status()
            while cid not in seen:
                arrived.clear()
                await asyncio.wait_for(arrived.wait(), 30)
            if i >= warmup:
                latencies.append((seen[cid] - start) * 1000)
    reader.cancel()
    return latencies


async def concurrent(url: str, clients: int, seconds: float) -> tuple[int, int, list[float]]:
    done = errors = 0
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def client(k: int) -> None:
        nonlocal done, errors
        async with httpx.AsyncClient(timeout=60) as http:
            while time.perf_counter() < deadline:
                body = envelope("hello from the benchmark", f"conc-{k}-{uuid.uuid4().hex[:8]}")
                start = time.perf_counter()
                try:
                    resp = await http.post(f"{url}/ingress/intent", params={"wait": "execution"}, json=body)
                    ok = resp.status_code == 202 and "execution" in resp.json()
                except httpx.HTTPError:
                    ok = False
                if ok:
                    done += 1
                    latencies.append((time.perf_counter() - start) * 1000)
                else:
                    errors += 1

    started = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(clients)))
    elapsed = time.perf_counter() - started
    return done, errors, [done / elapsed, *latencies]


def summary(name: str, values: list[float]) -> str:
    return (
        f"{name}: n={len(values)} p50={pct(values, 50):.1f} ms p95={pct(values, 95):.1f} ms "
        f"p99={pct(values, 99):.1f} ms mean={statistics.fmean(values):.1f} ms"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="a running turngate (default: start `turngate dev` here)")
    parser.add_argument("-n", "--turns", type=int, default=200, help="sequential turns (200)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("-c", "--clients", type=int, default=8, help="concurrent clients (8)")
    parser.add_argument("-d", "--seconds", type=float, default=20.0, help="concurrent phase length (20)")
    parser.add_argument("--echo-delay-ms", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    async with contextlib.AsyncExitStack() as stack:
        proc = None
        if args.url:
            url = args.url
        else:
            url, proc = await stack.enter_async_context(own_turngate(args.echo_delay_ms))
        print(f"turngate at {url}; {args.turns} sequential turns ...", file=sys.stderr)
        seq = await sequential(url, args.turns, args.warmup)
        print(f"{args.clients} clients for {args.seconds:.0f}s ...", file=sys.stderr)
        done, errors, rest = await concurrent(url, args.clients, args.seconds)
        memory = tree_rss_mb(proc.pid) if proc else {}
    result = {
        "sequential_ms": {"p50": pct(seq, 50), "p95": pct(seq, 95), "p99": pct(seq, 99)},
        "concurrent": {
            "clients": args.clients,
            "turns": done,
            "errors": errors,
            "turns_per_s": round(rest[0], 1),
            "p50_ms": pct(rest[1:], 50) if done else None,
        },
        "rss_mb_after_load": memory,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(summary("sequential POST -> EXECUTION on /tail", seq))
        print(
            f"concurrent: {args.clients} clients, {done} turns, {errors} errors, {rest[0]:.1f} turns/s"
            + (f", p50 {pct(rest[1:], 50):.1f} ms" if done else "")
        )
        print(f"RSS after load (MB): {memory}")


if __name__ == "__main__":
    asyncio.run(main())
