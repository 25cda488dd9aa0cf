"""One tenant's heaviest ``/v1/chat/completions`` calls do not stall another tenant.

A real ``turngate serve`` process (keys on, a real Temporal dev server) whose ledger holds a long
thread of tenant A (1,200 events). A's own process sends, six at a time and without pause, the
largest calls the API takes: the full message cap of ~1 KB multibyte messages (just under the
body limit) on that thread, none matching a recorded event, and a 25,000-message history under
the body limit. Each is refused (400 ``openai.unmatched_history``, 413
``openai.too_many_messages``), and meanwhile tenant B's ``GET /capabilities`` keeps its p99 under
100 ms.

The one timing assertion of the suite: it is what this guarantee is, so it is made robust. B's key
and connection are warmed up first; 300 calls are timed, only while the load runs; the load is
far heavier than what stalled the loop before (a thread scan per history message, parsing on the
event loop: p99 of 13 s and more); and since this machine's other work can stall a few calls on
its own, a window that misses is measured again, up to three times (a stall the load causes
misses them all). It runs in its own xdist group (``latency``), apart from the files whose
real stacks would share its CPU on the same test worker.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.openai_compat.heavy_load import STARTED
from tests.processes import spawn, wait_http
from tests.security.conftest import make_key
from tests.stack import make_settings
from turngate.core.events import EventDraft, EventKind
from turngate.devserver import DevServer
from turngate.ledger import LedgerStore
from turngate.settings import Settings

pytestmark = pytest.mark.xdist_group("latency")

THREAD = "long-thread"
RECORDED_TURNS = 400  # 1,200 events on A's thread
CAP = 1024  # TURNGATE_OPENAI_MAX_MESSAGES's default
BODY_LIMIT = 1024 * 1024  # TURNGATE_MAX_BODY_BYTES's default
CONCURRENCY = 6
WARM_UP = 30
SAMPLES = 300
WINDOW_S = 60.0  # a window's longest run (stalled calls would take minutes)
WINDOWS = 3
P99_LIMIT_S = 0.100


def _seed_thread(settings: Settings) -> None:
    """A's thread: RECORDED_TURNS recorded exchanges (the events every history is matched against)."""
    drafts: list[EventDraft] = []
    for n in range(RECORDED_TURNS):
        turn = f"turn-{n}"
        for kind, payload in (
            (EventKind.INTENT, {"payload": {"message": f"question {n}"}, "inputs": {}}),
            (EventKind.DECISION, {"decision": "ALLOW", "reason_codes": []}),
            (EventKind.EXECUTION, {"output_text": f"answer {n}"}),
        ):
            drafts.append(
                EventDraft(
                    kind=kind,
                    thread_id=THREAD,
                    turn_id=turn,
                    correlation_id=turn,
                    payload=payload,
                    tenant_id="a",
                )
            )
    with LedgerStore(settings.effective_ledger_url) as ledger:
        ledger.append_many(drafts)


def _body(messages: list[dict[str, str]]) -> bytes:
    return json.dumps({"model": "echo-1", "messages": messages}, ensure_ascii=False).encode("utf-8")


def _capped_body() -> bytes:
    """CAP messages, each ~1 KB of multibyte text matching nothing: as large as the limits allow."""
    text = "žuvis ąžuolas 🙂 " * 44  # 968 bytes
    roles = ("user", "assistant")
    messages = [{"role": roles[i % 2], "content": f"{i} {text}"} for i in range(CAP - 1)]
    body = _body([*messages, {"role": "user", "content": "and now?"}])
    assert len(body) <= BODY_LIMIT and len(json.loads(body)["messages"]) == CAP
    return body


def _long_body() -> bytes:
    """25,000 short messages (the history of the report this guards against), under the body limit."""
    messages = [{"role": "user", "content": f"m{i}"} for i in range(24_999)]
    body = _body([*messages, {"role": "user", "content": "and now?"}])
    assert len(body) <= BODY_LIMIT
    return body


@pytest.fixture
def api(tmp_path: Path, temporal_server: DevServer) -> Iterator[tuple[str, str, str]]:
    """The API process; yields its base URL and the keys of tenants A and B."""
    settings = make_settings(tmp_path, temporal_server.address, auth_mode="keys")
    _seed_thread(settings)
    key_a = make_key(settings, "a", "intent.write")
    key_b = make_key(settings, "b", "intent.write")
    # Rate limits off the path: every heavy call must reach the work it measures.
    env = {"TURNGATE_AUTH": "keys", "TURNGATE_RATE_LIMIT_PER_S": "1000", "TURNGATE_RATE_LIMIT_BURST": "1000"}
    proc = spawn(["serve", "--port", str(settings.port)], settings, tmp_path / "api.log", **env)
    try:
        base = f"http://127.0.0.1:{settings.port}"
        wait_http(f"{base}/healthz", 60)
        yield base, key_a, key_b
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _heavy_tenant(tmp_path: Path, base: str, key: str) -> subprocess.Popen[str]:
    files = []
    for name, body in (("capped.json", _capped_body()), ("long.json", _long_body())):
        (tmp_path / name).write_bytes(body)
        files.append(str(tmp_path / name))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.openai_compat.heavy_load", base, key, THREAD, str(CONCURRENCY), *files],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _stop(load: subprocess.Popen[str]) -> dict[str, int]:
    """Close the load's stdin; what it saw (empty when it did not finish in time)."""
    try:
        out, _ = load.communicate(input="", timeout=120)
    except subprocess.TimeoutExpired:
        load.kill()
        load.communicate()
        return {}
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return dict(json.loads(lines[-1])) if lines else {}


async def _timed_get(http: httpx.AsyncClient) -> float:
    started = time.perf_counter()
    resp = await http.get("/capabilities")
    elapsed = time.perf_counter() - started
    assert resp.status_code == 200, resp.text
    return elapsed


async def _window(http: httpx.AsyncClient) -> list[float]:
    """SAMPLES sequential calls of tenant B, sorted (fewer if WINDOW_S runs out first)."""
    samples: list[float] = []
    deadline = time.monotonic() + WINDOW_S
    while len(samples) < SAMPLES and time.monotonic() < deadline:
        samples.append(await _timed_get(http))
        await asyncio.sleep(0.01)
    return sorted(samples)


def _p99(samples: list[float]) -> float:
    return samples[max(0, math.ceil(len(samples) * 0.99) - 1)]


def _summary(samples: list[float]) -> str:
    return (
        f"{len(samples)} calls: p50 {statistics.median(samples) * 1000:.1f} ms, "
        f"p99 {_p99(samples) * 1000:.1f} ms, max {samples[-1] * 1000:.1f} ms"
    )


async def test_heavy_histories_of_one_tenant_leave_another_tenants_p99_under_100ms(
    tmp_path: Path, api: tuple[str, str, str]
) -> None:
    base, key_a, key_b = api
    headers = {"Authorization": f"Bearer {key_b}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as http:
        for _ in range(WARM_UP):  # the key cache, the connection, the route
            await _timed_get(http)
        load = _heavy_tenant(tmp_path, base, key_a)
        windows: list[list[float]] = []
        try:
            assert load.stdout is not None
            assert (await asyncio.to_thread(load.stdout.readline)).strip() == STARTED
            await asyncio.sleep(1.0)  # every heavy call in flight
            # A second window only when the first misses: this machine's other work (not the
            # gateway's) can stall a few calls; the stalls the load caused fail both by far.
            while len(windows) < WINDOWS and (not windows or _p99(windows[-1]) >= P99_LIMIT_S):
                windows.append(await _window(http))
        finally:
            seen = await asyncio.to_thread(_stop, load)
    summary = "; ".join(_summary(w) for w in windows) + f"; tenant A's answers: {seen}"
    assert min(_p99(w) for w in windows) < P99_LIMIT_S, summary
    # The load was real: both kinds of call were answered, with their codes, and nothing else.
    assert set(seen) == {"400 openai.unmatched_history", "413 openai.too_many_messages"}, summary
