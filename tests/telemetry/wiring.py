"""Test wiring: the workers of ``turngate.worker.run`` (with a registry of the test's own) and the
API of ``turngate.api.app``, both on one Temporal client that carries the tracing interceptor."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
from temporalio.client import Client
from temporalio.worker import Worker

from turngate.activities.ledger import LedgerActivities
from turngate.activities.provider import ProviderActivities
from turngate.activities.turn_step import TurnStepActivities
from turngate.artifacts import open_artifact_store
from turngate.cli import _uvicorn_server
from turngate.ledger import LedgerStore
from turngate.providers.registry import build_providers, close_providers
from turngate.settings import Settings
from turngate.telemetry import (
    TurngateMetrics,
)
from turngate.temporal_client import connect, ensure_search_attributes
from turngate.worker.boundary import load_boundary
from turngate.workflows.turn import TurnWorkflow


@contextlib.asynccontextmanager
async def traced_worker(settings: Settings, client: Client, metrics: TurngateMetrics) -> AsyncIterator[None]:
    boundary = load_boundary(settings)
    await ensure_search_attributes(client, settings.temporal_namespace)
    store = LedgerStore(settings.effective_ledger_url)
    providers = build_providers(settings)
    artifacts = open_artifact_store(settings.effective_artifacts)
    # The worker's own registry, so counts are this test's alone (the process default is shared).
    ledger = LedgerActivities(store, artifacts, boundary, metrics=metrics)
    calls = ProviderActivities(providers, None, artifacts, metrics=metrics)
    executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="test-ledger")
    workers = [
        Worker(
            client,
            task_queue=settings.turns_task_queue,
            workflows=[TurnWorkflow],
            activities=[ledger.begin_turn, ledger.append_event],
            activity_executor=executor,
        ),
        Worker(
            client,
            task_queue=settings.llm_task_queue,
            activities=[calls.call_provider, TurnStepActivities(store, ledger, calls).call_and_record],
        ),
    ]
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        yield
    finally:
        await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
        await asyncio.gather(*tasks, return_exceptions=True)
        await close_providers(providers)
        executor.shutdown(wait=True)
        store.close()


@dataclass
class TracedStack:
    http: httpx.AsyncClient
    client: Client
    worker_metrics: TurngateMetrics


@contextlib.asynccontextmanager
async def traced_stack(settings: Settings) -> AsyncIterator[TracedStack]:
    from turngate.api.app import create_app

    client = await connect(settings)  # after the test's configure_tracing: carries the interceptor
    worker_metrics = TurngateMetrics()
    app = create_app(settings, client=client)
    server = _uvicorn_server(app, settings.host, settings.port)
    async with traced_worker(settings, client, worker_metrics):
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        try:
            async with httpx.AsyncClient(
                base_url=f"http://{settings.host}:{settings.port}", timeout=30
            ) as http:
                yield TracedStack(http, client, worker_metrics)
        finally:
            server.should_exit = True
            await task
