"""Crash tests against a real Temporal dev server: workers and the API die, turns survive."""

from __future__ import annotations

import asyncio
import signal

import httpx

from tests.processes import spawn, turn_inside_provider_call, until, wait_http
from tests.stack import envelope, make_settings, running_stack
from turngate.ledger import LedgerStore, verify_ledger


def _kinds(store: LedgerStore, correlation_id: str) -> list[str]:
    return [str(e.kind) for e in store.by_correlation(correlation_id)]


async def test_worker_killed_during_provider_call(tmp_path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address, echo_delay_ms=250)
    store = LedgerStore(settings.effective_ledger_url)
    first = spawn(["worker"], settings, tmp_path / "worker-1.log")
    second = None
    try:
        async with running_stack(settings, worker=False) as stack:
            await turn_inside_provider_call(stack, store, "c-kill")
            first.send_signal(signal.SIGKILL)
            first.wait(10)
            second = spawn(["worker"], settings, tmp_path / "worker-2.log")
            await until(lambda: "EXECUTION" in _kinds(store, "c-kill"), 60, "the EXECUTION")
        assert _kinds(store, "c-kill") == ["INTENT", "DECISION", "EXECUTION"]
        execution = store.by_correlation("c-kill")[-1]
        assert execution.payload["output_text"] == "echo: one two three four five six seven eight"
        assert verify_ledger(store).ok
    finally:
        for proc in (first, second):
            if proc and proc.poll() is None:
                proc.terminate()
                proc.wait(15)
        store.close()


async def test_api_killed_with_turns_in_flight(tmp_path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address, echo_delay_ms=50)
    store = LedgerStore(settings.effective_ledger_url)
    base = f"http://127.0.0.1:{settings.port}"
    api_args = ["serve", "--port", str(settings.port)]
    api = spawn(api_args, settings, tmp_path / "api-1.log")
    acked: list[str] = []
    try:
        async with _worker_only(settings):
            await asyncio.to_thread(wait_http, f"{base}/healthz")

            async def submit(i: int) -> None:
                body = envelope(f"message number {i}", correlation_id=f"c-{i}")
                try:
                    async with httpx.AsyncClient(timeout=20) as http:
                        resp = await http.post(f"{base}/ingress/intent", json=body)
                    if resp.status_code == 202 and resp.json()["index"] is not None:
                        acked.append(f"c-{i}")
                except httpx.HTTPError:
                    pass  # the API died under this request: not acknowledged

            tasks = [asyncio.create_task(submit(i)) for i in range(12)]
            await until(lambda: len(acked) >= 3, 30, "some acknowledgements")
            api.send_signal(signal.SIGKILL)
            api.wait(10)
            await asyncio.gather(*tasks)
            api = spawn(api_args, settings, tmp_path / "api-2.log")
            await asyncio.to_thread(wait_http, f"{base}/healthz")

            def settled() -> bool:
                return all(len(_kinds(store, c)) == 3 for c in acked)

            await until(settled, 60, "every acknowledged turn to finish")
            # No orphans either: every recorded INTENT has its DECISION (unacked ones included).
            await until(
                lambda: all(
                    "DECISION" in _kinds(store, e.correlation_id)
                    for e in store.snapshot(limit=1000)[1]
                    if str(e.kind) == "INTENT"
                ),
                60,
                "a DECISION for every INTENT",
            )
        assert acked
        assert verify_ledger(store).ok
    finally:
        if api.poll() is None:
            api.terminate()
            api.wait(15)
        store.close()


def _worker_only(settings):
    from turngate.worker.run import running_worker

    return running_worker(settings)
