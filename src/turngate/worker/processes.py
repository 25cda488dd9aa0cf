"""`turngate worker --processes N`: N worker processes under one supervisor, to use every core.

One Python process runs on one core at a time (the GIL); turns are independent Temporal
workflows, so N worker processes polling the same task queues share the load. The supervisor
imports nothing heavy: it starts ``turngate worker`` N times, restarts a child that exits, and
gives up loudly (exit 1, every other child stopped) when children keep dying: more than
``RESTART_LIMIT`` exits within ``RESTART_WINDOW_S``. SIGINT/SIGTERM stop every child (SIGTERM,
then SIGKILL after ``STOP_GRACE_S``). A child whose supervisor is gone (SIGKILL of the parent)
notices it through ``PARENT_PID_ENV`` and stops by itself. Nothing is lost when a child dies:
its turns are Temporal workflows, resumed by another worker (docs/DESIGN.md). Each child has its
own provider slots (TURNGATE_LLM_CONCURRENCY) and its own metrics port (see :func:`child_env`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

#: Set by the supervisor in each child: the child stops when its parent process is no longer it.
PARENT_PID_ENV = "TURNGATE_WORKER_PARENT_PID"
#: The worker's /metrics and /healthz address (turngate.telemetry.metrics; not imported here: the
#: supervisor stays light).
METRICS_BIND_ENV = "TURNGATE_WORKER_METRICS_BIND"
RESTART_LIMIT = 5
RESTART_WINDOW_S = 60.0
RESTART_DELAY_S = 0.5
STOP_GRACE_S = 30.0
PARENT_CHECK_S = 1.0


def child_command(python: str = sys.executable) -> list[str]:
    """One worker process (what ``turngate worker`` runs without ``--processes``)."""
    return [python, "-m", "turngate", "worker", "--processes", "1"]


@dataclass
class WorkerSupervisor:
    """Keeps ``processes`` copies of ``command`` running until ``stop`` is set (or they keep dying)."""

    processes: int
    command: list[str] = field(default_factory=child_command)
    env: Mapping[str, str] | None = None
    restart_limit: int = RESTART_LIMIT
    restart_window_s: float = RESTART_WINDOW_S
    stop_grace_s: float = STOP_GRACE_S
    children: dict[int, asyncio.subprocess.Process] = field(default_factory=dict)
    _exits: list[float] = field(default_factory=list)

    async def _spawn(self, slot: int) -> None:
        env = child_env(self.env if self.env is not None else os.environ, slot)
        proc = await asyncio.create_subprocess_exec(*self.command, env=env)
        self.children[slot] = proc
        log.info("worker process %d started (pid %d)", slot, proc.pid)

    async def run(self, stop: asyncio.Event) -> int:
        """0 after a requested stop; 1 when children died more often than the restart limit."""
        for slot in range(self.processes):
            await self._spawn(slot)
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                waits = {asyncio.create_task(p.wait()): slot for slot, p in self.children.items()}
                done, _ = await asyncio.wait([stopping, *waits], return_when=asyncio.FIRST_COMPLETED)
                for task in waits:
                    task.cancel()
                if stop.is_set():
                    break
                for task in done - {stopping}:
                    if not await self._restart(waits[task]):
                        return 1
            return 0
        finally:
            stopping.cancel()
            await self.stop_all()

    async def _restart(self, slot: int) -> bool:
        code = self.children[slot].returncode
        now = time.monotonic()
        self._exits = [t for t in self._exits if now - t < self.restart_window_s] + [now]
        if len(self._exits) > self.restart_limit:
            log.error(
                "worker process %d exited with %s; %d exits within %.0f s is over the limit of %d: "
                "stopping every worker process",
                slot,
                code,
                len(self._exits),
                self.restart_window_s,
                self.restart_limit,
            )
            return False
        log.error(
            "worker process %d (pid %d) exited with %s; restarting it", slot, self.children[slot].pid, code
        )
        await asyncio.sleep(RESTART_DELAY_S)
        await self._spawn(slot)
        return True

    async def stop_all(self) -> None:
        """SIGTERM every running child, SIGKILL what is still running after the grace period."""
        running = [p for p in self.children.values() if p.returncode is None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in running)), self.stop_grace_s)
        except TimeoutError:
            for proc in running:
                if proc.returncode is None:
                    log.error(
                        "worker process pid %d did not stop in %.0f s: killing it",
                        proc.pid,
                        self.stop_grace_s,
                    )
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
            await asyncio.gather(*(p.wait() for p in running))


def child_env(environ: Mapping[str, str], slot: int) -> dict[str, str]:
    """A child's environment: its supervisor's pid, and its own metrics port (the configured
    port plus the child's slot: 9464, 9465, ...; port 0 stays 0, a free port each)."""
    env = {**environ, PARENT_PID_ENV: str(os.getpid())}
    host, _, port = env.get(METRICS_BIND_ENV, "").strip().rpartition(":")
    if port.isdigit() and int(port) != 0:
        env[METRICS_BIND_ENV] = f"{host}:{int(port) + slot}"
    return env


async def stop_when_orphaned(stop: asyncio.Event, environ: Mapping[str, str] = os.environ) -> None:
    """In a supervised child: set ``stop`` once the supervisor is gone (we were re-parented)."""
    parent = environ.get(PARENT_PID_ENV, "")
    if not parent.isdigit():
        return
    while not stop.is_set():
        if os.getppid() != int(parent):
            log.error("the worker supervisor (pid %s) is gone: stopping this worker process", parent)
            stop.set()
            return
        await asyncio.sleep(PARENT_CHECK_S)
