"""Start a turngate to measure: `turngate dev` on free loopback ports, with its echo provider.

The echo provider is the fake provider here: it answers after ``TURNGATE_ECHO_LATENCY_MS``
(3 ms by default, like the fake provider the targets were set against). Worker and API share
one process (``turngate dev``); the Temporal dev server is its child, so memory is reported for
both separately.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from turngate.devserver import free_port

STARTUP_TIMEOUT_S = 60.0


@dataclass
class RunningTurngate:
    url: str
    pid: int | None
    """The `turngate dev` process (worker + API); None for a turngate we did not start."""
    data_dir: Path | None
    headers: dict[str, str] = field(default_factory=dict)


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def rss_by_role(pid: int) -> dict[str, float]:
    """Resident MB of worker+API (`turngate dev` itself) and of the Temporal server (child)."""
    out = {"turngate": _rss_mb(pid) or 0.0, "temporal": 0.0}
    for child in _children(pid):
        out["temporal"] += _rss_mb(child) or 0.0
    return out


def _cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def cpu_by_role(pid: int) -> dict[str, float]:
    """CPU seconds used so far by worker+API (`turngate dev`) and by the Temporal server."""
    return {"turngate": _cpu_s(pid), "temporal": sum(_cpu_s(c) for c in _children(pid))}


class MemorySampler:
    """Peak RSS per role, sampled every ``interval_s`` while running (a background task)."""

    def __init__(self, pid: int | None, interval_s: float = 0.2) -> None:
        self.pid, self.interval_s = pid, interval_s
        self.peak: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> None:
        if self.pid is None:
            return
        for role, mb in rss_by_role(self.pid).items():
            self.peak[role] = round(max(self.peak.get(role, 0.0), mb), 1)

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval_s)

    def __enter__(self) -> MemorySampler:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *_: object) -> None:
        if self._task:
            self._task.cancel()
        self.sample()


async def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    async with httpx.AsyncClient() as http:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"turngate dev exited with {proc.returncode}; see {log}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(f"{url}/healthz")).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"turngate did not answer /healthz in {STARTUP_TIMEOUT_S:.0f}s; see {log}")


@contextlib.asynccontextmanager
async def start_turngate(env: Mapping[str, str]) -> AsyncIterator[RunningTurngate]:
    """`turngate dev` in a fresh data directory, with ``env`` over this process's environment."""
    data = Path(tempfile.mkdtemp(prefix="turngate-bench-"))
    port, temporal_port, ui_port = free_port(), free_port(), free_port()
    child_env = {**os.environ, "TURNGATE_LOG_LEVEL": "WARNING", **env}
    log = data / "dev.log"
    command = [sys.executable, "-m", "turngate", "dev", "--data-dir", str(data), "--port", str(port)]
    command += ["--temporal-port", str(temporal_port), "--ui-port", str(ui_port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, env=child_env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        await _wait_healthy(url, proc, log)
        yield RunningTurngate(url, proc.pid, data, _dev_key_headers(log))
    finally:
        proc.send_signal(2)
        try:
            await asyncio.to_thread(proc.wait, 30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _dev_key_headers(log: Path) -> dict[str, str]:
    """`turngate dev` prints a local API key (``tgk_...``); else TURNGATE_BENCH_API_KEY, if set."""
    found = re.search(r"\btgk_[A-Za-z0-9_-]+", log.read_text(errors="replace"))
    key = found.group(0) if found else os.environ.get("TURNGATE_BENCH_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}
