"""A turngate made of real child processes (`turngate worker` + `turngate serve`) for the
fault suite, with the helpers its tests share."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.processes import spawn, until, wait_http
from turngate.devserver import free_port
from turngate.ledger import LedgerStore
from turngate.settings import Settings

__all__ = ["child_stack", "intents_without_decision", "kinds", "until"]


@contextlib.contextmanager
def child_stack(
    settings: Settings, logs: Path, *, api_env: dict[str, str] | None = None, **env: str
) -> Iterator[str]:
    """Worker and API as child processes sharing ``env`` (the API with ``api_env`` on top);
    yields the API's base URL."""
    base = f"http://127.0.0.1:{settings.port}"
    # the worker's own /healthz answers once it polls: a test starts its faults only then (a
    # worker still starting would meet them in its set-up and exit instead)
    bind = env.get("TURNGATE_WORKER_METRICS_BIND") or f"127.0.0.1:{free_port()}"
    worker = spawn(
        ["worker"], settings, logs / "worker.log", **(env | {"TURNGATE_WORKER_METRICS_BIND": bind})
    )
    api_args = ["serve", "--port", str(settings.port)]
    api = spawn(api_args, settings, logs / "api.log", **(env | (api_env or {})))
    try:
        wait_http(f"{base}/healthz", 60)
        _wait_ready(worker, f"http://{bind}/healthz", logs / "worker.log")
        yield base
    finally:
        for proc in (api, worker):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except Exception:
                    proc.kill()
                    proc.wait(10)


def _wait_ready(worker: subprocess.Popen[bytes], url: str, log: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited ({worker.returncode}): {log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    raise TimeoutError(f"the worker was not ready within {timeout_s} s: {log.read_text()[-2000:]}")


def kinds(store: LedgerStore, correlation_id: str) -> list[str]:
    return [str(e.kind) for e in store.by_correlation(correlation_id)]


def intents_without_decision(store: LedgerStore) -> list[str]:
    _, events = store.snapshot(limit=2000)
    decided = {e.correlation_id for e in events if str(e.kind) == "DECISION"}
    return [e.correlation_id for e in events if str(e.kind) == "INTENT" and e.correlation_id not in decided]
