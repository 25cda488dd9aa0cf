"""The benchmark scenarios. Each takes a running turngate and returns its figures.

Latency is always end to end: from sending the POST until the turn's last event (EXECUTION,
or a DECISION that does not allow execution) is visible to a client, which turngate only shows
once it is durable in Temporal and in the ledger.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import httpx

from bench.client import TailClock, distribution, intent, ledger_events, pct, refs_to
from bench.history import history_events_per_turn
from bench.stack import MemorySampler, RunningTurngate, cpu_by_role

MESSAGE = "hello from the benchmark"
# the refusals that promise nothing was recorded (checked against the ledger afterwards)
REFUSALS = {503: "queue.full", 429: "rate.limited"}


@dataclass(frozen=True)
class Sizes:
    """How much each scenario does (the issue's figures by default; --quick shrinks them)."""

    sequential_turns: int = 200
    warmup: int = 20
    clients: int = 8
    concurrent_s: float = 15.0
    thread_turns: int = 600
    thread_window: int = 50
    overload_clients: int = 8
    overload_s: float = 10.0
    overload_rate: float = 25.0
    """requests per second per client (8 x 25/s: several times what 2 cores can run)"""
    slow_delay_ms: int = 2000
    slow_concurrency: int = 32
    slow_clients: int = 40
    slow_s: float = 20.0


QUICK = Sizes(
    sequential_turns=5,
    warmup=1,
    clients=2,
    concurrent_s=2.0,
    thread_turns=12,
    thread_window=3,
    overload_clients=4,
    overload_s=2.0,
    slow_delay_ms=300,
    slow_concurrency=4,
    slow_clients=6,
    slow_s=3.0,
)


def _client(target: RunningTurngate, timeout: float = 60.0) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    return httpx.AsyncClient(base_url=target.url, headers=target.headers, timeout=timeout, limits=limits)


async def sequential(target: RunningTurngate, sizes: Sizes) -> dict[str, Any]:
    """One client, one turn at a time, each on a new thread: POST, then EXECUTION on /tail."""
    latencies: list[float] = []
    async with TailClock(target.url, target.headers) as clock, _client(target) as http:
        for i in range(sizes.warmup + sizes.sequential_turns):
            body = intent(MESSAGE, f"seq-{uuid.uuid4().hex[:8]}")
            start = time.perf_counter()
            (await http.post("/ingress/intent", json=body)).raise_for_status()
            finished = await clock.wait(body["correlation_id"])
            if i >= sizes.warmup:
                latencies.append((finished - start) * 1000)
    result: dict[str, Any] = {"latency_ms": distribution(latencies)}
    if target.temporal_address:
        result["history_events_per_turn"] = await history_events_per_turn(target.temporal_address)
    return result


async def _closed_loop(
    target: RunningTurngate, clients: int, seconds: float, thread_prefix: str, warm_s: float = 1.0
) -> dict[str, Any]:
    """``clients`` clients, each `POST ?wait=execution` on its own threads, for ``seconds``."""
    done = 0
    errors: dict[str, int] = defaultdict(int)
    latencies: list[float] = []
    finished: list[float] = []
    deadline = time.perf_counter() + seconds

    async def client(k: int, http: httpx.AsyncClient) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            body = intent(MESSAGE, f"{thread_prefix}-{k}-{uuid.uuid4().hex[:8]}")
            start = time.perf_counter()
            try:
                resp = await http.post("/ingress/intent", params={"wait": "execution"}, json=body)
            except httpx.HTTPError as exc:
                errors[type(exc).__name__] += 1
                continue
            if resp.status_code == 202 and "execution" in resp.json():
                done += 1
                finished.append(time.perf_counter())
                latencies.append((finished[-1] - start) * 1000)
            else:
                errors[f"{resp.status_code} {resp.json().get('reason_code', '')}".strip()] += 1

    started = time.perf_counter()
    async with _client(target) as http:
        await asyncio.gather(*(client(k, http) for k in range(clients)))
    elapsed = time.perf_counter() - started
    # steady state: completions after the first ``warm_s`` (the pipeline filling) until the end
    steady = sum(1 for t in finished if started + warm_s <= t <= deadline) / max(1e-9, seconds - warm_s)
    return {
        "steady_turns_per_s": round(steady, 1),
        "clients": clients,
        "seconds": round(elapsed, 1),
        "turns": done,
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "turns_per_s": round(done / elapsed, 1),
        "latency_ms": distribution(latencies),
    }


async def concurrent(target: RunningTurngate, sizes: Sizes) -> dict[str, Any]:
    before = cpu_by_role(target.pid) if target.pid else {}
    with MemorySampler(target.pid) as memory:
        result = await _closed_loop(target, sizes.clients, sizes.concurrent_s, "conc")
    after = cpu_by_role(target.pid) if target.pid else {}
    # CPU per turn bounds throughput: cores / (API + workers + Temporal CPU per turn)
    cpu_ms = {
        role: round((after[role] - before[role]) * 1000 / max(1, result["turns"]), 1) for role in before
    }
    return {**result, "peak_rss_mb": memory.peak, "cpu_ms_per_turn": cpu_ms}


async def thread(target: RunningTurngate, sizes: Sizes) -> dict[str, Any]:
    """One thread of chained turns, each declaring refs to the previous two turns.

    Each chained turn is followed by a control turn on a fresh thread (no refs): the control
    turns show what the machine and the growing ledger do over the same minutes, so a cost that
    grows with the thread's length is told apart from drift that affects every turn.
    """
    thread_id = f"chain-{uuid.uuid4().hex[:8]}"
    chain: list[float] = []
    control: list[float] = []
    previous: list[str] = []
    not_executed = 0

    async def timed(http: httpx.AsyncClient, body: dict[str, Any], into: list[float]) -> bool:
        start = time.perf_counter()
        resp = await http.post("/ingress/intent", params={"wait": "execution"}, json=body)
        into.append((time.perf_counter() - start) * 1000)
        return resp.status_code == 202 and "execution" in resp.json()

    async with _client(target) as http:
        for _ in range(sizes.thread_turns):
            body = intent(MESSAGE, thread_id, refs=refs_to(*previous[-2:]))
            not_executed += not await timed(http, body, chain)
            previous.append(body["correlation_id"])
            fresh = intent(MESSAGE, f"control-{uuid.uuid4().hex[:8]}")
            not_executed += not await timed(http, fresh, control)
    window = sizes.thread_window
    ratio = _window_ratio(chain, window)
    control_ratio = _window_ratio(control, window)
    return {
        "turns": len(chain),
        "not_executed": not_executed,
        "first_window_p50_ms": pct(chain[:window], 50),
        "last_window_p50_ms": pct(chain[-window:], 50),
        "ratio": ratio,
        "window": window,
        "ms_per_100_turns": _slope(chain, per=100),
        "control_ratio": control_ratio,
        "ratio_over_control": round(ratio / control_ratio, 2) if ratio and control_ratio else None,
    }


def _window_ratio(values: list[float], window: int) -> float | None:
    first, last = pct(values[:window], 50), pct(values[-window:], 50)
    return round(last / first, 2) if first and last else None


def _slope(values: list[float], per: int) -> float | None:
    """Least-squares growth of ``values`` per ``per`` steps (a cost that grows with the thread
    shows here, while the two windows' medians also carry the machine's noise)."""
    n = len(values)
    if n < 2:
        return None
    mean_x, mean_y = (n - 1) / 2, statistics.fmean(values)
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(values))
    variance = sum((x - mean_x) ** 2 for x in range(n))
    return round(covariance / variance * per, 2)


async def overload(target: RunningTurngate, sizes: Sizes) -> dict[str, Any]:
    """Open loop: each client sends ``overload_rate`` requests/s, not waiting for answers.

    Then: every accepted turn must complete, no refused request may have left a record, and a
    fresh turn must go through once the backlog drained (the system recovers by itself).
    """
    accepted: list[str] = []
    refused: list[str] = []
    refused_by: dict[str, int] = defaultdict(int)
    other: dict[str, int] = defaultdict(int)
    deadline = time.perf_counter() + sizes.overload_s

    async def send(k: int, http: httpx.AsyncClient) -> None:
        body = intent(MESSAGE, f"over-{k}-{uuid.uuid4().hex[:8]}")
        try:
            resp = await http.post("/ingress/intent", json=body)
        except httpx.HTTPError as exc:
            other[type(exc).__name__] += 1
            return
        cid = body["correlation_id"]
        if resp.status_code == 202:
            accepted.append(cid)
        elif resp.status_code in REFUSALS and resp.json().get("reason_code") == REFUSALS[resp.status_code]:
            refused.append(cid)
            refused_by[REFUSALS[resp.status_code]] += 1
        else:
            other[str(resp.status_code)] += 1

    async def client(k: int, http: httpx.AsyncClient) -> None:
        # open loop: a new request every 1/rate s, whether or not earlier ones were answered
        in_flight: list[asyncio.Task[None]] = []
        while time.perf_counter() < deadline:
            in_flight.append(asyncio.create_task(send(k, http)))
            await asyncio.sleep(1 / sizes.overload_rate)
        await asyncio.gather(*in_flight)

    with MemorySampler(target.pid) as memory:
        async with TailClock(target.url, target.headers) as clock, _client(target) as http:
            await asyncio.gather(*(client(k, http) for k in range(sizes.overload_clients)))
            load_ended = time.perf_counter()
            incomplete = await _wait_all(clock, accepted, timeout_s=300)
            drained_s = time.perf_counter() - load_ended
            recorded = await _recorded_kinds(http)
            probe = intent(MESSAGE, f"over-probe-{uuid.uuid4().hex[:8]}")
            resp = await http.post("/ingress/intent", params={"wait": "execution"}, json=probe)
            recovered = resp.status_code == 202 and "execution" in resp.json()
    refused_recorded = sum(1 for cid in refused if cid in recorded)
    partial = sum(1 for cid in accepted if not _complete(recorded.get(cid, set())))
    return {
        "clients": sizes.overload_clients,
        "seconds": sizes.overload_s,
        "offered_per_s": sizes.overload_clients * sizes.overload_rate,
        "sent": len(accepted) + len(refused) + sum(other.values()),
        "accepted": len(accepted),
        "refused": dict(refused_by),
        "other_responses": dict(other),
        "accepted_not_completed": incomplete,
        "accepted_partially_recorded": partial,
        "refused_but_recorded": refused_recorded,
        "lost": incomplete + partial + refused_recorded + sum(other.values()),
        "drained_after_s": round(drained_s, 1),
        "recovered": recovered,
        "peak_rss_mb": memory.peak,
    }


async def _wait_all(clock: TailClock, correlation_ids: list[str], timeout_s: float) -> int:
    """How many of the turns did not finish within ``timeout_s`` (all waited for together)."""
    deadline = time.monotonic() + timeout_s
    missing = 0
    for cid in correlation_ids:
        try:
            await clock.wait(cid, max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            missing += 1
    return missing


async def _recorded_kinds(http: httpx.AsyncClient) -> dict[str, set[str]]:
    kinds: dict[str, set[str]] = defaultdict(set)
    async for event in ledger_events(http):
        kinds[event["correlation_id"]].add(event["kind"])
    return kinds


def _complete(kinds: set[str]) -> bool:
    return {"INTENT", "DECISION"} <= kinds  # EXECUTION checked on /tail (a DENY has none)


async def slow_provider(target: RunningTurngate, sizes: Sizes) -> dict[str, Any]:
    """A provider taking ``slow_delay_ms`` per answer, ``slow_concurrency`` provider slots."""
    delay_s = sizes.slow_delay_ms / 1000
    result = await _closed_loop(target, sizes.slow_clients, sizes.slow_s, "slow", warm_s=2 * delay_s)
    bound = sizes.slow_concurrency / delay_s
    return {
        **result,
        "provider_delay_ms": sizes.slow_delay_ms,
        "provider_concurrency": sizes.slow_concurrency,
        "provider_bound_turns_per_s": round(bound, 1),
        "share_of_bound": round(result["steady_turns_per_s"] / bound, 3),
    }
