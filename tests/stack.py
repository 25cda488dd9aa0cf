"""An in-process turngate (worker + API on a real port) for integration tests."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from turngate.cli import _uvicorn_server
from turngate.devserver import free_port
from turngate.settings import Settings, load_settings


def make_settings(data_dir: Path, temporal_address: str, **overrides: object) -> Settings:
    suffix = uuid.uuid4().hex[:8]
    values: dict[str, object] = {
        "temporal_address": temporal_address,
        "data_dir": data_dir,
        "turns_task_queue": f"turns-{suffix}",
        "llm_task_queue": f"llm-{suffix}",
        "policy_module": "turngate.policies.allow_all",
        "port": free_port(),
        "wait_timeout_s": 20.0,
        "workflow_id_prefix": f"t{suffix}",
        "job_queue_prefix": f"jobs-{suffix}",
        # Unauthenticated loopback access, as `turngate dev`: the suites that test something
        # else stay key-free; tests/security turns keys on (auth_mode="keys").
        "auth_mode": "dev",
    }
    values.update(overrides)
    return load_settings(**values)


@dataclass
class Stack:
    settings: Settings
    http: httpx.AsyncClient

    async def chat(
        self,
        message: str,
        *,
        correlation_id: str,
        wait: str | None = "execution",
        **payload: Any,
    ) -> httpx.Response:
        body = envelope(message, correlation_id=correlation_id, **payload)
        params = {"wait": wait} if wait else {}
        return await self.http.post("/ingress/intent", params=params, json=body)


def envelope(message: str, *, correlation_id: str, **payload: Any) -> dict[str, Any]:
    inner: dict[str, Any] = {"intent_type": "chat.message", "payload": {"message": message}}
    inner.update(payload)
    return {"interface_version": 3, "correlation_id": correlation_id, "payload": inner}


@contextlib.asynccontextmanager
async def api_server(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    from turngate.api.app import create_app

    server = _uvicorn_server(create_app(settings), settings.host, settings.port)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    base = f"http://{settings.host}:{settings.port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            yield http
    finally:
        server.should_exit = True
        await task


@contextlib.asynccontextmanager
async def running_stack(settings: Settings, *, worker: bool = True) -> AsyncIterator[Stack]:
    from turngate.worker.run import running_worker

    async with contextlib.AsyncExitStack() as stack:
        if worker:
            await stack.enter_async_context(running_worker(settings))
        http = await stack.enter_async_context(api_server(settings))
        yield Stack(settings, http)
