"""Start a turngate to measure: `turngate dev` on free loopback ports, with its echo provider.

The echo provider is the fake provider here: it answers after ``TURNGATE_ECHO_LATENCY_MS``
(3 ms by default, like the fake provider the targets were set against). Started as
``turngate dev``: the API in its process, the worker there too or in worker processes (one per
core by default); the Temporal dev server and the worker processes are its children, so memory
and CPU are reported per role.
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
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from turngate.devserver import DevServer, free_port

STARTUP_TIMEOUT_S = 60.0


@dataclass
class RunningTurngate:
    url: str
    pid: int | None
    """The `turngate dev` process (worker + API); None for a turngate we did not start."""
    data_dir: Path | None
    headers: dict[str, str] = field(default_factory=dict)
    temporal_address: str | None = None
    """Its Temporal dev server (to count history events per turn); None when not started here."""


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


def _is_temporal(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"start-dev" in argv


def _by_role(pid: int, measure: Callable[[int], float]) -> dict[str, float]:
    """``measure`` per role: ``api`` (the `turngate dev` process: API, and the worker when it
    runs there), ``workers`` (its worker processes), ``turngate`` (both), ``temporal`` (the
    Temporal dev server, also its child)."""
    out = {"api": measure(pid), "workers": 0.0, "temporal": 0.0}
    for child in _children(pid):
        out["temporal" if _is_temporal(child) else "workers"] += measure(child)
    out["turngate"] = out["api"] + out["workers"]
    return out


def rss_by_role(pid: int) -> dict[str, float]:
    """Resident MB per role (see :func:`_by_role`)."""
    return _by_role(pid, lambda p: _rss_mb(p) or 0.0)


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def cpu_by_role(pid: int) -> dict[str, float]:
    """CPU seconds used so far per role (see :func:`_by_role`)."""
    return _by_role(pid, cpu_seconds)


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


async def wait_healthy(
    url: str, proc: subprocess.Popen[bytes], log: Path, what: str = "turngate dev"
) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    async with httpx.AsyncClient() as http:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode}; see {log}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(f"{url}/healthz")).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{what} did not answer /healthz in {STARTUP_TIMEOUT_S:.0f}s; see {log}")


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
        await wait_healthy(url, proc, log)
        temporal = f"127.0.0.1:{temporal_port}"
        yield RunningTurngate(url, proc.pid, data, _dev_key_headers(log), temporal)
    finally:
        await interrupt(proc)


async def interrupt(proc: subprocess.Popen[bytes], grace_s: float = 30) -> None:
    """Ctrl-C for ``proc``; killed if it has not ended within ``grace_s``."""
    proc.send_signal(2)
    try:
        await asyncio.to_thread(proc.wait, grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()


def _dev_key_headers(log: Path) -> dict[str, str]:
    """`turngate dev` prints a local API key (``tgk_...``); else TURNGATE_BENCH_API_KEY, if set."""
    found = re.search(r"\btgk_[A-Za-z0-9_-]+", log.read_text(errors="replace"))
    key = found.group(0) if found else os.environ.get("TURNGATE_BENCH_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


@contextlib.asynccontextmanager
async def temporal_dev_server(root: Path, *, persistent: bool = False) -> AsyncIterator[DevServer]:
    """A Temporal dev server of its own on a free port, its log under ``root`` (``persistent``:
    its SQLite file there too, else in memory)."""
    db_file = root / "temporal.sqlite3" if persistent else None
    server = DevServer(db_file=db_file, port=free_port(), ui_port=None, log_file=root / "temporal.log")
    server.start()
    try:
        await server.wait_ready()
        yield server
    finally:
        server.stop()
