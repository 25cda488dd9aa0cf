"""Run `turngate worker` / `turngate serve` as real child processes for crash tests."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from turngate.settings import Settings


def process_env(settings: Settings, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "TEMPORAL_ADDRESS": settings.temporal_address,
            "TURNGATE_DATA_DIR": str(settings.data_dir),
            "TURNGATE_TURNS_TASK_QUEUE": settings.turns_task_queue,
            "TURNGATE_LLM_TASK_QUEUE": settings.llm_task_queue,
            "TURNGATE_WORKFLOW_ID_PREFIX": settings.workflow_id_prefix,
            "TURNGATE_POLICY_MODULE": settings.policy_module or "",
            "TURNGATE_ECHO_DELAY_MS": str(settings.echo_delay_ms),
            "TURNGATE_LOG_LEVEL": "WARNING",
        }
    )
    env.update(extra)
    return env


def spawn(args: list[str], settings: Settings, log: Path, **extra: str) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 - owned by the child for its lifetime
    return subprocess.Popen(
        [sys.executable, "-m", "turngate", *args],
        env=process_env(settings, **extra),
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def wait_http(url: str, timeout_s: float = 30.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Until ``url`` answers below 500; with ``proc``, fail at once if that process exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the process serving {url} exited with {proc.returncode} before it answered")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout_s}s")


async def until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``check`` every 0.1 s until it holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


LONG_MESSAGE = "one two three four five six seven eight"


async def turn_inside_provider_call(stack: Any, store: Any, correlation_id: str) -> None:
    """Start a turn with a streaming echo answer (echo_delay_ms=250 per word) and return while its
    provider call runs: INTENT and DECISION recorded, no EXECUTION yet."""
    resp = await stack.chat(LONG_MESSAGE, correlation_id=correlation_id, wait="decision")
    assert resp.json()["decision"]["payload"]["decision"] == "ALLOW"
    await asyncio.sleep(0.6)  # inside the streaming provider call
    assert [str(e.kind) for e in store.by_correlation(correlation_id)] == ["INTENT", "DECISION"]
