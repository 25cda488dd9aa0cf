"""One floor shape, in its own process: ``python -m bench.floor_run ADDRESS SHAPE ...``.

The process runs the shape's worker and its starters (``client.execute_workflow``, no eager
start), like a turngate process runs its API and worker, so its CPU per turn is the SDK's floor
for the shape. Prints one JSON object: sequential latency, 8-client throughput, CPU per turn of
this process and of the Temporal server (``--server-pid``), history events per turn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from typing import Any

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from bench.client import distribution
from bench.floor_shapes import SHAPES, ledger_step, provider_call
from bench.stack import cpu_seconds
from turngate.temporal_client import ensure_search_attributes

HISTORY_SAMPLE = 10


async def _sequential(
    client: Client, shape: type, queue: str, llm: str, warmup: int, turns: int
) -> list[float]:
    latencies = []
    for i in range(warmup + turns):
        start = time.perf_counter()
        await client.execute_workflow(shape, llm, id=f"floor-seq-{uuid.uuid4().hex}", task_queue=queue)
        if i >= warmup:
            latencies.append((time.perf_counter() - start) * 1000)
    return latencies


async def _closed_loop(
    client: Client, shape: type, queue: str, llm: str, clients: int, seconds: float
) -> tuple[list[float], list[str], float]:
    latencies: list[float] = []
    ids: list[str] = []
    deadline = time.perf_counter() + seconds

    async def starter() -> None:
        while time.perf_counter() < deadline:
            workflow_id = f"floor-conc-{uuid.uuid4().hex}"
            start = time.perf_counter()
            await client.execute_workflow(shape, llm, id=workflow_id, task_queue=queue)
            latencies.append((time.perf_counter() - start) * 1000)
            ids.append(workflow_id)

    started = time.perf_counter()
    await asyncio.gather(*(starter() for _ in range(clients)))
    return latencies, ids, time.perf_counter() - started


async def _history_events(client: Client, ids: list[str]) -> dict[str, Any]:
    counts = [
        len((await client.get_workflow_handle(i).fetch_history()).events) for i in ids[-HISTORY_SAMPLE:]
    ]
    if not counts:
        return {"n": 0}
    return {"n": len(counts), "median": statistics.median(counts), "min": min(counts), "max": max(counts)}


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    client = await Client.connect(args.address)
    await ensure_search_attributes(client)  # the shapes that write turngate's attributes
    shape = SHAPES[args.shape]
    queue = f"floor-{uuid.uuid4().hex[:8]}"
    # --same-queue: the provider activity on the workflow's own task queue, where the server
    # hands it back in the workflow task's completion (eager activity execution).
    llm = queue if args.same_queue else f"floor-llm-{uuid.uuid4().hex[:8]}"
    runner = SandboxedWorkflowRunner() if args.sandbox else UnsandboxedWorkflowRunner()
    workers = [
        Worker(
            client,
            task_queue=queue,
            workflows=[shape],
            activities=[ledger_step, provider_call],
            workflow_runner=runner,
        ),
    ]
    if not args.same_queue:
        workers.append(Worker(client, task_queue=llm, activities=[provider_call]))
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        sequential = await _sequential(client, shape, queue, llm, args.warmup, args.turns)
        me, server = os.getpid(), args.server_pid
        before = {"sdk": cpu_seconds(me), "temporal": cpu_seconds(server)}
        latencies, ids, elapsed = await _closed_loop(client, shape, queue, llm, args.clients, args.seconds)
        after = {"sdk": cpu_seconds(me), "temporal": cpu_seconds(server)}
        history = await _history_events(client, ids)
    finally:
        await asyncio.gather(*(w.shutdown() for w in workers))
        await asyncio.gather(*tasks, return_exceptions=True)
    turns = max(1, len(ids))
    return {
        "shape": args.shape,
        "sandbox": args.sandbox,
        "same_queue": args.same_queue,
        "sequential_latency_ms": distribution(sequential),
        "clients": args.clients,
        "turns": len(ids),
        "turns_per_s": round(len(ids) / elapsed, 1),
        "latency_ms": distribution(latencies),
        "cpu_ms_per_turn": {role: round((after[role] - before[role]) * 1000 / turns, 1) for role in after},
        "history_events_per_turn": history,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.floor_run", description=__doc__)
    parser.add_argument("address")
    parser.add_argument("shape", choices=list(SHAPES))
    parser.add_argument("--server-pid", type=int, required=True)
    parser.add_argument("--sandbox", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--same-queue", action="store_true", help="provider activity on the workflow's queue")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--turns", type=int, default=100, help="sequential turns after the warm-up")
    parser.add_argument("--warmup", type=int, default=10)
    print(json.dumps(asyncio.run(measure(parser.parse_args(argv)))), flush=True)
    # Skip interpreter finalization: the SDK's core threads may still call into Python while it
    # runs (a fatal "PyGILState_Release" at exit was seen on a loaded machine). The figures are
    # printed and the workers shut down: nothing is left to clean up.
    os._exit(0)


if __name__ == "__main__":
    main()
