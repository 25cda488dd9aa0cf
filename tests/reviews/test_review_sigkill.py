"""A turn waiting for review survives its worker and API being SIGKILLed: real `turngate worker`
and `turngate serve` processes, two tenants' keys, the verdict given with the `turngate reviews`
command. The provider (a fake Ollama on 127.0.0.1) is called exactly once, after the approval;
the EXECUTION is recorded and `turngate verify` (re-running the review policy) passes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.fakes.llm_servers import FakeOllamaServer
from tests.processes import process_env, spawn, until, wait_http
from tests.security.conftest import bearer, make_key
from tests.stack import envelope, make_settings
from turngate.devserver import DevServer
from turngate.ledger import LedgerStore

ROOT = Path(__file__).resolve().parents[2]


def _kinds(store: LedgerStore, correlation_id: str) -> list[str]:
    return [str(e.kind) for e in store.by_correlation(correlation_id)]


def _cli(settings, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turngate", *args],
        env=process_env(settings, **env),
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_a_waiting_turn_survives_sigkill_and_is_approved_through_the_cli(
    tmp_path: Path, temporal_server: DevServer
) -> None:
    provider = FakeOllamaServer("the refund is on its way").start()
    settings = make_settings(
        tmp_path,
        temporal_server.address,
        auth_mode="keys",
        ollama_host=provider.origin,
        policy_module="tests.reviews.policies",
        policy_object="FOUR_EYES",
    )
    env = {
        "OLLAMA_HOST": provider.origin,
        "TURNGATE_AUTH": "keys",
        "TURNGATE_POLICY_OBJECT": "FOUR_EYES",
        "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)])),
    }
    writer = make_key(settings, "t1", "intent.write,snapshot.read")
    reviewer = make_key(settings, "t1", "review")
    other_tenant = make_key(settings, "t2", "review")
    base = f"http://127.0.0.1:{settings.port}"
    procs: list[subprocess.Popen[bytes]] = []

    def start(generation: int) -> None:
        procs.append(spawn(["worker"], settings, tmp_path / f"worker-{generation}.log", **env))
        procs.append(
            spawn(
                ["serve", "--port", str(settings.port)], settings, tmp_path / f"api-{generation}.log", **env
            )
        )
        wait_http(f"{base}/healthz", 60)

    store = LedgerStore(settings.effective_ledger_url)
    try:
        start(1)
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            body = envelope("please refund order 42", correlation_id="c-killed")
            sent = await http.post("/ingress/intent", json=body, headers=bearer(writer))
            assert sent.status_code == 202, sent.text

            async def listed() -> bool:
                answer = await http.get("/reviews", headers=bearer(reviewer))
                return any(r["correlation_id"] == "c-killed" for r in answer.json()["reviews"])

            for _ in range(300):
                if await listed():
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the turn never waited for review")
            assert _kinds(store, "c-killed") == ["INTENT"] and provider.requests == []

            for proc in procs:  # the worker and the API die while the turn waits
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
            start(2)

            refused = _cli(
                settings, "reviews", "approve", "c-killed", "--url", base, "--api-key", other_tenant, **env
            )
            assert refused.returncode == 1 and "review.not_found" in refused.stderr, refused.stderr
            listed_cli = _cli(settings, "reviews", "list", "--url", base, "--api-key", reviewer, **env)
            assert listed_cli.returncode == 0 and "c-killed" in listed_cli.stdout, listed_cli.stderr
            approved = _cli(
                settings,
                "reviews",
                "approve",
                "c-killed",
                "--comment",
                "order 42 checked",
                "--url",
                base,
                "--api-key",
                reviewer,
                **env,
            )
            assert approved.returncode == 0, approved.stderr
            await until(lambda: "EXECUTION" in _kinds(store, "c-killed"), 60, "the EXECUTION")
        assert len(provider.requests) == 1
        assert _kinds(store, "c-killed") == ["INTENT", "DECISION", "EXECUTION"]
        decision, execution = store.by_correlation("c-killed")[1:]
        assert decision.payload["review"]["verdict"] == "approve"
        assert execution.payload["output_text"] == "the refund is on its way"
        verified = _cli(settings, "verify", "--json", **env)
        assert verified.returncode == 0, verified.stdout + verified.stderr
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(15)
        provider.stop()
        store.close()
