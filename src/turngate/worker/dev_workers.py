"""The worker of ``turngate dev``: in the dev process, or supervised worker processes beside it
(``--worker-processes N``, TURNGATE_WORKER_PROCESSES; docs/DEPLOY.md)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping

from temporalio.client import Client

from turngate.settings import Settings
from turngate.worker.pollers import wait_for_pollers
from turngate.worker.processes import WorkerSupervisor
from turngate.worker.run import running_worker


def dev_worker_processes(configured: int | None, cpus: int | None = None) -> int:
    """``turngate dev``: the configured count (TURNGATE_WORKER_PROCESSES) if set, else a worker
    process per two cores on a machine with more than two, else 0 (the worker runs in the dev
    process itself).

    Why (docs/BENCHMARKS.md, CPU per turn): the worker processes use ~40 % of a turn's CPU, the
    Temporal dev server as much, the API the rest, so workers on half the cores keep pace with
    the others. On 2 cores, separate processes cost more CPU per turn (no eager start, two
    processes' overhead) than the GIL they escape: measured slower and 3x the memory."""
    if configured is not None:
        return configured
    cpus = os.cpu_count() if cpus is None else cpus
    return cpus // 2 if cpus and cpus > 2 else 0


def workers_line(processes: int) -> str:
    if processes == 0:
        return "in this process (turngate dev --worker-processes N for N processes)"
    return f"{processes} processes (turngate dev --worker-processes N; 0: in this process)"


def dev_worker_env(settings: Settings, inherited: Mapping[str, str]) -> dict[str, str]:
    """A worker process's environment: the ``inherited`` one with what `turngate dev` decided
    (its Temporal address, data directory, policy and key file) written over it."""
    env = {
        **inherited,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "TURNGATE_DATA_DIR": str(settings.data_dir),
    }
    env["TURNGATE_POLICY_MODULE"] = settings.policy_module or ""
    if settings.encryption_keys_file:
        env["TURNGATE_ENCRYPTION_KEYS_FILE"] = str(settings.encryption_keys_file)
    return env


@contextlib.asynccontextmanager
async def dev_workers(
    settings: Settings,
    client: Client,
    processes: int,
    stop: asyncio.Event,
    inherited_env: Mapping[str, str],
) -> AsyncIterator[asyncio.Task[int] | None]:
    """The worker of `turngate dev`: in this process (0), or ``processes`` supervised worker
    processes started with ``inherited_env`` plus what ``settings`` decided (yields the
    supervisor's task; it sets ``stop`` when it gives up)."""
    if processes == 0:
        async with running_worker(settings, client=client):
            yield None
        return
    supervisor = WorkerSupervisor(processes, env=dev_worker_env(settings, inherited_env))
    task = asyncio.create_task(supervisor.run(stop))
    task.add_done_callback(lambda _: stop.set())
    try:
        pids = lambda: [p.pid for p in supervisor.children.values()]  # noqa: E731
        waiting = asyncio.create_task(wait_for_pollers(client, settings.turns_task_queue, pids))
        await asyncio.wait([waiting, task], return_when=asyncio.FIRST_COMPLETED)
        if task.done() or not waiting.result():
            waiting.cancel()
            stop.set()
            raise SystemExit("the worker processes did not start (see their log lines above)")
        yield task
    finally:
        stop.set()
        await task
