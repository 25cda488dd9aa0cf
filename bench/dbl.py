"""Side by side with the published DBL gateway: the same fake provider, the same client harness.

Optional (it installs a package from PyPI): ``python -m bench.dbl`` or ``python -m bench --dbl``.

- The DBL gateway ``dbl-gateway==1.0.1`` is installed with pip into its own venv under the
  work directory (once; later runs reuse it) and started as ``dbl-gateway serve`` with its
  documented variables: ``DBL_GATEWAY_POLICY_MODULE=dbl_policy.allow_all``,
  ``DBL_GATEWAY_BOUNDARY_CONFIG`` / ``DBL_GATEWAY_CONTEXT_CONFIG`` (the package ships none: a
  minimal boundary that allows every request class, written here), ``DBL_GATEWAY_DB``,
  ``DBL_GATEWAY_AUTH_MODE=dev``, ``OLLAMA_HOST`` / ``OLLAMA_MODEL_IDS``. Everything else is its
  default (its ``/tail`` polls the store every 0.1 s).
- turngate is ``turngate dev`` as shipped, its provider Ollama (``OLLAMA_HOST``,
  ``TURNGATE_DEFAULT_PROVIDER=ollama``).
- Both call one fake Ollama server (:mod:`bench.dbl_provider`, its own process) answering after
  ``--latency-ms``; both get the same envelope (the DBL gateway's minimal template); the client
  for both is the suite's: POST ``/ingress/intent``, then the turn's EXECUTION seen on ``/tail``.

Measured: sequential end-to-end latency (one client, a new thread per turn), and 8 clients in a
closed loop (each POSTs, waits for its EXECUTION on ``/tail``, sends the next): throughput in the
steady state and latency percentiles; CPU seconds per turn per process. Printed: both figures,
the ratios turngate / DBL, and the goals (sequential p50 <= 0.45x, throughput >= 1.2x, a lower
8-client p99).

    python -m bench.dbl                  # the suite's sizes (about 2 minutes plus the install)
    python -m bench.dbl --quick          # tiny sizes: checks it runs
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.client import TailClock, distribution, new_correlation_id
from bench.dbl_provider import MODEL
from bench.scenarios import MESSAGE, QUICK, Sizes
from bench.stack import cpu_by_role, interrupt, start_turngate, wait_healthy
from turngate.devserver import free_port

DBL_PACKAGE = "dbl-gateway==1.0.1"
WORK_DIR = Path(tempfile.gettempdir()) / "turngate-bench-dbl"
NO_RATE_LIMIT = {"TURNGATE_RATE_LIMIT_PER_S": "1000000", "TURNGATE_RATE_LIMIT_BURST": "1000000"}
GOALS = {"sequential_p50": 0.45, "throughput": 1.2}


@dataclass(frozen=True)
class Gateway:
    name: str
    url: str
    pid: int
    headers: Mapping[str, str]


def envelope(thread: str) -> dict[str, Any]:
    """One turn, in the shape both gateways accept (the DBL gateway's minimal template)."""
    correlation_id = new_correlation_id("dbl")
    return {
        "interface_version": 3,
        "correlation_id": correlation_id,
        "payload": {
            "stream_id": "default",
            "lane": "user_chat",
            "actor": "bench",
            "intent_type": "chat.message",
            "thread_id": thread,
            "turn_id": correlation_id,
            "requested_model_id": MODEL,
            "payload": {"message": MESSAGE},
        },
    }


# ------------------------------------------------------------------ the two runs


def _http(gateway: Gateway) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    return httpx.AsyncClient(base_url=gateway.url, headers=dict(gateway.headers), timeout=60, limits=limits)


async def _turn(http: httpx.AsyncClient, clock: TailClock, thread: str) -> float:
    """One turn: milliseconds from sending the POST until its EXECUTION is on /tail."""
    body = envelope(thread)
    start = time.perf_counter()
    response = await http.post("/ingress/intent", json=body)
    if response.status_code not in (200, 202):
        raise RuntimeError(f"{response.status_code} {response.text[:200]}")
    return (await clock.wait(body["correlation_id"]) - start) * 1000


def _cpu_s(gateway: Gateway) -> dict[str, float]:
    """CPU seconds so far: turngate's per role (API, workers, Temporal), the DBL gateway's one
    process."""
    by_role = cpu_by_role(gateway.pid)
    return by_role if gateway.name == "turngate" else {"process": by_role["api"]}


def _cpu_ms_per_turn(before: dict[str, float], after: dict[str, float], turns: int) -> dict[str, float]:
    return {role: round((after[role] - before[role]) * 1000 / max(turns, 1), 1) for role in after}


async def sequential(gateway: Gateway, sizes: Sizes) -> dict[str, Any]:
    latencies: list[float] = []
    async with TailClock(gateway.url, dict(gateway.headers)) as clock, _http(gateway) as http:
        for i in range(sizes.warmup + sizes.sequential_turns):
            if i == sizes.warmup:
                cpu = _cpu_s(gateway)
            latency = await _turn(http, clock, f"seq-{uuid.uuid4().hex[:8]}")
            if i >= sizes.warmup:
                latencies.append(latency)
    return {
        "latency_ms": distribution(latencies),
        "cpu_ms_per_turn": _cpu_ms_per_turn(cpu, _cpu_s(gateway), len(latencies)),
    }


async def concurrent(gateway: Gateway, sizes: Sizes, warm_s: float = 1.0) -> dict[str, Any]:
    """``sizes.clients`` clients in a closed loop for ``sizes.concurrent_s``."""
    latencies: list[float] = []
    finished: list[float] = []
    errors: dict[str, int] = defaultdict(int)

    async def client(k: int, http: httpx.AsyncClient, clock: TailClock, deadline: float) -> None:
        while time.perf_counter() < deadline:
            try:
                latencies.append(await _turn(http, clock, f"conc-{k}-{uuid.uuid4().hex[:8]}"))
                finished.append(time.perf_counter())
            except (RuntimeError, httpx.HTTPError, TimeoutError) as exc:
                errors[str(exc)[:60] or type(exc).__name__] += 1

    async with TailClock(gateway.url, dict(gateway.headers)) as clock, _http(gateway) as http:
        cpu = _cpu_s(gateway)
        started = time.perf_counter()
        deadline = started + sizes.concurrent_s
        await asyncio.gather(*(client(k, http, clock, deadline) for k in range(sizes.clients)))
        cpu_after = _cpu_s(gateway)
    steady = [t for t in finished if started + warm_s <= t <= deadline]
    return {
        "clients": sizes.clients,
        "turns": len(finished),
        "turns_per_s": round(len(steady) / max(1e-9, sizes.concurrent_s - warm_s), 1),
        "latency_ms": distribution(latencies),
        "errors": dict(errors),
        "cpu_ms_per_turn": _cpu_ms_per_turn(cpu, cpu_after, len(finished)),
    }


async def measure(gateway: Gateway, sizes: Sizes) -> dict[str, Any]:
    _progress(f"{gateway.name}: sequential ...")
    result = {"sequential": await sequential(gateway, sizes)}
    _progress(f"{gateway.name}: {sizes.clients} clients ...")
    result["concurrent"] = await concurrent(gateway, sizes)
    _progress(f"{gateway.name}: {json.dumps(result)}")
    return result


# ------------------------------------------------------------------ starting things


def _progress(message: str) -> None:
    print(f"[bench.dbl {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ensure_dbl(work: Path) -> Path:
    """The ``dbl-gateway`` command of a venv under ``work`` holding the pinned release."""
    venv = work / "venv"
    command = venv / "bin" / "dbl-gateway"
    version = DBL_PACKAGE.split("==")[1]
    check = [
        str(venv / "bin" / "python"),
        "-c",
        "import importlib.metadata as m; print(m.version('dbl-gateway'))",
    ]
    if command.exists() and subprocess.run(check, capture_output=True, text=True).stdout.strip() == version:
        return command
    _progress(f"installing {DBL_PACKAGE} into {venv}")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", DBL_PACKAGE], check=True)
    return command


def _allow_everything_boundary() -> dict[str, Any]:
    """A boundary config for the DBL gateway that admits the benchmark's turns: every request
    class allowed for every trust class, no tools, dev identities."""
    modes, classes = ("public", "operator", "demo"), ("probe", "intent", "execution_light", "execution_heavy")
    budget = {"max_tokens": 8192, "max_duration_ms": 60000}
    surfaces = "healthz capabilities ingress_intent surfaces intent_template snapshot thread_timeline tail"
    surfaces += " status execution_event"
    slot = {"slot_class": "shared", "cost_class": "bounded", "reservation_required": False}
    return {
        "schema_version": "1",
        "boundary_version": "turngate-bench",
        "exposure_mode": "operator",
        "surface_rules": dict.fromkeys(surfaces.split(), "public"),
        "admission": {
            "public": {
                "allow_artifact_handle": False,
                "allow_declared_refs": True,
                "max_declared_tools": 0,
                "max_budget": budget,
            }
        },
        "identity_policy": {
            "mode": "dev",
            "issuers_allowed": [],
            "audiences_allowed": [],
            "claim_mapping": {"actor_id": ["sub"], "issuer": "iss", "roles": ["roles"]},
            "tenant_mapping": {"claim": "tid", "fallback": "default", "allowlist": ["*"]},
        },
        "tool_policy": {"families": {"none": ["none.*"]}, "matrix": {m: {"*": []} for m in modes}},
        "request_policy": {
            "classification": {"light_budget": budget},
            "matrix": {
                m: {"*": {c: {"decision": "allow", "max_budget": budget} for c in classes}} for m in modes
            },
        },
        "economic_policy": {"matrix": {m: {"*": dict.fromkeys(classes, slot)} for m in modes}},
    }


@contextlib.asynccontextmanager
async def _process(
    what: str, command: list[str], env: Mapping[str, str], url: str, log: Path
) -> AsyncIterator[int]:
    """``command`` running until the block ends, once ``url``/healthz answers."""
    with log.open("wb") as out:
        proc = subprocess.Popen(command, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT)
    try:
        await wait_healthy(url, proc, log, what)
        yield proc.pid
    finally:
        await interrupt(proc)


@contextlib.asynccontextmanager
async def fake_provider(run: Path, latency_ms: float) -> AsyncIterator[str]:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "bench.dbl_provider",
        "--port",
        str(port),
        "--latency-ms",
        str(latency_ms),
    ]
    url = f"http://127.0.0.1:{port}"
    async with _process("the fake provider", command, {}, url, run / "provider.log"):
        yield url


@contextlib.asynccontextmanager
async def start_dbl(command: Path, run: Path, provider_url: str) -> AsyncIterator[Gateway]:
    boundary, context = run / "boundary.json", run / "context.json"
    boundary.write_text(json.dumps(_allow_everything_boundary()))
    context.write_text(
        json.dumps({"schema_version": "1", "context": {"max_refs": 50, "empty_refs_policy": "ALLOW_EMPTY"}})
    )
    env = {
        "DBL_GATEWAY_POLICY_MODULE": "dbl_policy.allow_all",
        "DBL_GATEWAY_BOUNDARY_CONFIG": str(boundary),
        "DBL_GATEWAY_CONTEXT_CONFIG": str(context),
        "DBL_GATEWAY_AUTH_MODE": "dev",
        "OLLAMA_HOST": provider_url,
        "OLLAMA_MODEL_IDS": MODEL,
    }
    port = free_port()
    argv = [
        str(command),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--db",
        str(run / "trail.sqlite"),
    ]
    url = f"http://127.0.0.1:{port}"
    async with _process("dbl-gateway", argv, env, url, run / "dbl-gateway.log") as pid:
        yield Gateway("dbl-gateway 1.0.1", url, pid, {})


# ------------------------------------------------------------------ the report


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return round(ours / theirs, 2) if ours is not None and theirs else None


def compare(turngate: dict[str, Any], dbl: dict[str, Any]) -> dict[str, Any]:
    rows = {
        "sequential_p50_ms": ("sequential", "latency_ms", "p50"),
        "sequential_p99_ms": ("sequential", "latency_ms", "p99"),
        "concurrent_turns_per_s": ("concurrent", "turns_per_s", None),
        "concurrent_p50_ms": ("concurrent", "latency_ms", "p50"),
        "concurrent_p99_ms": ("concurrent", "latency_ms", "p99"),
    }
    table: dict[str, dict[str, float | None]] = {}
    for row, (scenario, key, sub) in rows.items():
        ours, theirs = turngate[scenario][key], dbl[scenario][key]
        if sub:
            ours, theirs = ours[sub], theirs[sub]
        table[row] = {"turngate": ours, "dbl": theirs, "ratio": _ratio(ours, theirs)}
    goals = {
        "sequential_p50 <= 0.45x": _at_most(table["sequential_p50_ms"]["ratio"], GOALS["sequential_p50"]),
        "8-client throughput >= 1.2x": _at_least(
            table["concurrent_turns_per_s"]["ratio"], GOALS["throughput"]
        ),
        "8-client p99 lower": _at_most(table["concurrent_p99_ms"]["ratio"], 1.0, strict=True),
    }
    return {"figures": table, "goals": goals}


def _at_most(ratio: float | None, bound: float, *, strict: bool = False) -> bool | None:
    if ratio is None:
        return None
    return ratio < bound if strict else ratio <= bound


def _at_least(ratio: float | None, bound: float) -> bool | None:
    return None if ratio is None else ratio >= bound


def render(comparison: dict[str, Any]) -> str:
    lines = [f"{'':<24}{'turngate':>10}{'dbl 1.0.1':>11}{'ratio':>8}"]
    for row, cells in comparison["figures"].items():
        values = [cells["turngate"], cells["dbl"], cells["ratio"]]
        lines.append(
            f"{row:<24}"
            + "".join(f"{'-' if v is None else v:>{w}}" for v, w in zip(values, (10, 11, 8), strict=True))
        )
    for goal, met in comparison["goals"].items():
        lines.append(f"{'PASS' if met else 'MISS'}  {goal}")
    return "\n".join(lines)


async def side_by_side(sizes: Sizes, latency_ms: float = 3.0, work: Path = WORK_DIR) -> dict[str, Any]:
    """Both gateways, one after the other, against one fake provider; the figures and ratios."""
    work.mkdir(parents=True, exist_ok=True)
    command = await asyncio.to_thread(ensure_dbl, work)
    run = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    async with fake_provider(run, latency_ms) as provider:
        env = {"OLLAMA_HOST": provider, "OLLAMA_MODEL_IDS": MODEL, "TURNGATE_DEFAULT_PROVIDER": "ollama"}
        _progress("starting turngate dev")
        async with start_turngate(env | NO_RATE_LIMIT) as target:
            assert target.pid is not None
            ours = await measure(Gateway("turngate", target.url, target.pid, target.headers), sizes)
        _progress("starting dbl-gateway")
        async with start_dbl(command, run, provider) as dbl:
            theirs = await measure(dbl, sizes)
    return {"turngate": ours, "dbl": theirs, "provider_latency_ms": latency_ms} | compare(ours, theirs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.dbl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks it runs, not speed")
    parser.add_argument("--latency-ms", type=float, default=3.0, help="fake provider time to answer (3)")
    parser.add_argument("--work-dir", type=Path, default=WORK_DIR, help=f"the venv and run data ({WORK_DIR})")
    parser.add_argument("--json", action="store_true", help="print the JSON results, not the table")
    args = parser.parse_args(argv)
    report = asyncio.run(side_by_side(QUICK if args.quick else Sizes(), args.latency_ms, args.work_dir))
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
