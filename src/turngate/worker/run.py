"""The worker process: turn workflows + ledger steps on one queue, provider calls on another,
and one queue per case job type (docs/JOBS.md).

One task queue per resource class: provider calls (and the turn steps around them) run on the
`llm` queue; TURNGATE_LLM_CONCURRENCY provider calls at once per worker, a semaphore around the
call itself, independent of how many turns are in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from turngate.activities.external_refs import ExternalRefActivities
from turngate.activities.ledger import LedgerActivities
from turngate.activities.provider import ProviderActivities
from turngate.activities.review_webhook import ReviewWebhookActivities
from turngate.activities.turn_step import TurnStepActivities
from turngate.artifacts import open_artifact_store
from turngate.core.policy import load_policy
from turngate.jobs.cases.registry import CaseRegistry
from turngate.jobs.domain.queues import job_concurrency, job_queues
from turngate.jobs.workers import job_workers
from turngate.ledger import LedgerStore
from turngate.policy_lifecycle.history import guard_policy_version
from turngate.prompts.pins import PromptPins
from turngate.providers.registry import build_providers, close_providers
from turngate.security.workbench import workbench_config
from turngate.service_gc import settle_after_start
from turngate.settings import Settings
from turngate.streaming import open_token_bus
from turngate.telemetry import (
    WORKER_SERVICE,
    configure_tracing,
    default_metrics,
    flush_tracing,
)
from turngate.telemetry.genai_metrics import configure_genai_metrics, flush_genai_metrics
from turngate.temporal_client import connect, ensure_search_attributes
from turngate.worker.boundary import load_boundary, store_boundary_configs
from turngate.worker.health import WorkerHealth, serve_worker_endpoints
from turngate.worker.llm_capacity import llm_worker_identity
from turngate.worker.sandbox import workflow_runner
from turngate.workflows.turn import TurnWorkflow

log = logging.getLogger(__name__)

#: Turn steps on the llm queue beyond the LLM concurrency: their ledger appends run meanwhile.
LEDGER_STEP_SLOTS = 16


@contextlib.asynccontextmanager
async def running_worker(
    settings: Settings,
    *,
    client: Client | None = None,
) -> AsyncIterator[list[Worker]]:
    """Start the turn and llm workers; on exit, shut them down gracefully."""
    boundary = load_boundary(settings)
    configure_tracing(WORKER_SERVICE)  # before connecting: the client carries the interceptor
    configure_genai_metrics(WORKER_SERVICE)  # gen_ai.client.* over OTLP when OTEL_* asks for it
    client = client or await connect(settings)
    await ensure_search_attributes(client)
    store = LedgerStore(settings.effective_ledger_url, timeout_s=settings.ledger_timeout_s)
    try:  # a changed policy that kept its version must not decide under the old name
        for policy in [load_policy(settings.policy_module, settings.policy_object)] + [
            load_policy(name) for name in settings.shadow_policies
        ]:
            guard_policy_version(store, policy, refuse=settings.policy_version_check == "refuse")
    except BaseException:
        store.close()
        raise
    providers = build_providers(settings)
    artifacts = open_artifact_store(settings.effective_artifacts)
    await asyncio.to_thread(store_boundary_configs, artifacts, boundary)  # before any DECISION
    pins = None
    if settings.prompts_dir and boundary.prompt_config:
        pins = PromptPins(settings.prompts_dir, boundary.prompt_config, store, artifacts)
    metrics = default_metrics()
    ledger = LedgerActivities(store, artifacts, boundary, pins, metrics)
    bus = open_token_bus(settings.effective_token_bus_url)
    local = settings.provider_activity == "local"
    calls = ProviderActivities(providers, bus, artifacts, metrics, concurrency=settings.llm_concurrency)
    registry = CaseRegistry(store.engine)
    external = ExternalRefActivities(
        registry,
        artifacts,
        cache_dir=settings.data_dir / "index-cache",
        workbench=workbench_config(settings),
    )
    secret = settings.review_webhook_secret
    webhook = ReviewWebhookActivities(
        settings.review_webhook_url, secret.get_secret_value() if secret else None
    )
    turn_activities: list[Callable[..., Any]] = [
        ledger.begin_turn,
        ledger.append_event,
        ledger.store_fault_snapshots,
        external.resolve_external_refs,
        webhook.notify_review,
    ]
    turn_activities += [calls.call_provider] if local else []
    executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="turngate-ledger")
    steps = TurnStepActivities(store, ledger, calls, executor, ledger_wait_s=settings.ledger_wait_s)
    turn_activities += [steps.call_and_record] if local else []
    workers = [
        Worker(
            client,
            task_queue=settings.turns_task_queue,
            workflows=[TurnWorkflow],
            activities=turn_activities,
            activity_executor=executor,
            max_concurrent_local_activities=16 + (settings.llm_concurrency if local else 0),
            workflow_runner=workflow_runner(settings.workflow_sandbox, client.data_converter),
        ),
        Worker(
            client,
            task_queue=settings.llm_task_queue,
            activities=[calls.call_provider, steps.call_and_record],
            # /status sums the limits the pollers of this queue name (api/llm_capacity.py)
            identity=llm_worker_identity(client.identity, settings.llm_concurrency),
            # The provider calls' own limit is llm_concurrency (ProviderActivities); the extra
            # slots let turn steps append their DECISION and EXECUTION meanwhile.
            max_concurrent_activities=settings.llm_concurrency + LEDGER_STEP_SLOTS,
        ),
    ]
    workers += job_workers(
        client,
        artifacts=artifacts,
        concurrency=job_concurrency(settings),
        queues=job_queues(settings),
        work_dir=settings.data_dir / "job-work",
        registry=registry,
    )
    (settings.data_dir / "job-work").mkdir(parents=True, exist_ok=True)
    tasks = [asyncio.create_task(w.run()) for w in workers]
    # /metrics and /healthz (ledger and Temporal reachable) only with TURNGATE_WORKER_METRICS_BIND
    health = WorkerHealth(store.head, client)
    health_task = asyncio.create_task(health.run())
    bind = settings.worker_metrics_bind.strip()
    metrics_server = serve_worker_endpoints(bind, metrics, health) if bind else None
    log.info(
        "worker up: turns=%s llm=%s (concurrency %d) jobs=%s-* (concurrency %s) policy=%s providers=%s",
        settings.turns_task_queue,
        settings.llm_task_queue,
        settings.llm_concurrency,
        settings.job_queue_prefix,
        job_concurrency(settings).model_dump(),
        settings.policy_module or "observer mode",
        ", ".join(sorted(providers)),
    )
    try:
        yield workers
    finally:
        await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
        health_task.cancel()
        await asyncio.gather(*tasks, health_task, return_exceptions=True)
        await close_providers(providers)
        await bus.aclose()  # after the workers: pending deltas are flushed
        executor.shutdown(wait=True)
        external.close()
        store.close()
        if metrics_server is not None:
            metrics_server.close()
        flush_tracing()
        flush_genai_metrics()
        log.info("worker stopped")


async def run_worker(settings: Settings, stop: asyncio.Event) -> None:
    async with running_worker(settings):
        settle_after_start()
        await stop.wait()
