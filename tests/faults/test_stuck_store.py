"""A stuck or failing S3 artifact store ends the turn with SYSTEM_ERROR within the artifact
deadline, and the next turn recovers. Worker and API are real child processes; the store is
moto's S3 server behind a proxy that stalls (accepts, never answers) or answers 500 on command.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest

from tests.artifacts.conftest import FAKE_AWS_ENV
from tests.faults.misbehaving_proxy import MisbehavingProxy
from tests.faults.processes import child_stack, intents_without_decision, kinds, until
from tests.stack import envelope, make_settings
from turngate.ledger import LedgerStore

DEADLINE_S = 6.0
#: A loaded 2-core machine: generous room over the deadline for process and Temporal latency.
MARGIN_S = 30.0


@pytest.fixture
def s3(moto_server: tuple[str, int]) -> Iterator[tuple[MisbehavingProxy, str]]:
    host, port = moto_server
    bucket = f"tg-{uuid.uuid4().hex[:16]}"
    boto3.client(
        "s3",
        endpoint_url=f"http://{host}:{port}",
        region_name="us-east-1",
        aws_access_key_id=FAKE_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    ).create_bucket(Bucket=bucket)
    proxy = MisbehavingProxy((host, port))
    try:
        yield proxy, bucket
    finally:
        proxy.close()


def _env(proxy: MisbehavingProxy, bucket: str) -> dict[str, str]:
    return FAKE_AWS_ENV | {
        "TURNGATE_ARTIFACTS": f"s3://{bucket}/turngate",
        "AWS_ENDPOINT_URL_S3": proxy.url,
        "TURNGATE_ARTIFACT_DEADLINE_S": str(DEADLINE_S),
        "TURNGATE_WAIT_TIMEOUT_S": "120",
    }


def _turn(base: str, correlation_id: str, message: str = "hello") -> tuple[httpx.Response, float]:
    started = time.monotonic()
    resp = httpx.post(
        f"{base}/ingress/intent",
        params={"wait": "execution"},
        json=envelope(message, correlation_id=correlation_id),
        timeout=180,
    )
    return resp, time.monotonic() - started


def _assert_system_error(resp: httpx.Response) -> None:
    assert resp.status_code == 202, resp.text
    decision = resp.json()["decision"]["payload"]
    assert decision["decision"] == "DENY"
    assert decision["reason_codes"] == ["SYSTEM_ERROR"]
    assert decision["error"]["missing_pointers"] == ["manifest"]
    assert "deadline" in decision["error"]["detail"] or "500" in decision["error"]["detail"]
    assert "127.0.0.1" not in decision["error"]["detail"]  # the store's endpoint is only logged
    assert "manifest" not in decision


def _assert_recovered(resp: httpx.Response) -> None:
    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert body["decision"]["payload"]["decision"] == "ALLOW"
    assert body["decision"]["payload"]["manifest"]["sha256"].startswith("sha256:")
    assert body["execution"]["payload"]["output_text"] == "echo: hello"
    assert body["execution"]["payload"]["manifest"]["sha256"].startswith("sha256:")


@pytest.fixture
def stack(tmp_path: Path, temporal_server, s3) -> Iterator[tuple[MisbehavingProxy, str, LedgerStore]]:
    """Worker and API (child processes) on the S3 store behind the proxy; yields (proxy, API
    base URL, the ledger)."""
    proxy, bucket = s3
    settings = make_settings(tmp_path, temporal_server.address)
    store = LedgerStore(settings.effective_ledger_url)
    try:
        with child_stack(settings, tmp_path, **_env(proxy, bucket)) as base:
            yield proxy, base, store
    finally:
        store.close()


async def test_a_store_that_never_answers_ends_the_turn_within_the_deadline(stack, record_property) -> None:
    proxy, base, store = stack
    proxy.set_mode("stall")
    resp, elapsed = _turn(base, "c-stuck-1")
    record_property("stuck_store_turn_s", round(elapsed, 2))
    print(f"stuck store: the turn ended with SYSTEM_ERROR after {elapsed:.1f} s")
    _assert_system_error(resp)
    assert DEADLINE_S <= elapsed < DEADLINE_S + MARGIN_S  # the deadline, not a quick refusal
    assert proxy.connections >= 1
    assert kinds(store, "c-stuck-1") == ["INTENT", "DECISION"]

    # A message over the inline limit is stored at ingress: 503, nothing recorded.
    started = time.monotonic()
    big = httpx.post(
        f"{base}/ingress/intent",
        json=envelope("x" * (70 * 1024), correlation_id="c-stuck-big"),
        timeout=120,
    )
    ingress_s = time.monotonic() - started
    record_property("stuck_store_ingress_s", round(ingress_s, 2))
    print(f"stuck store: ingress answered {big.status_code} after {ingress_s:.1f} s")
    assert big.status_code == 503, big.text
    assert big.json()["reason_code"] == "artifact.unavailable"
    assert DEADLINE_S <= ingress_s < DEADLINE_S + MARGIN_S
    assert kinds(store, "c-stuck-big") == []

    proxy.set_mode("forward")
    resp, _ = _turn(base, "c-stuck-2")
    _assert_recovered(resp)
    await until(lambda: not intents_without_decision(store), 30, "a DECISION for every INTENT")


async def test_a_store_answering_500_is_retried_then_stops_then_recovers(stack, record_property) -> None:
    proxy, base, store = stack
    # 500 on every attempt until the deadline passes: SYSTEM_ERROR, after several tries.
    proxy.set_mode("error500")
    resp, elapsed = _turn(base, "c-500-1")
    record_property("failing_store_turn_s", round(elapsed, 2))
    _assert_system_error(resp)
    assert "500" in resp.json()["decision"]["payload"]["error"]["detail"]
    assert proxy.errors_sent >= 2, "transient errors are retried inside the deadline"
    assert elapsed < DEADLINE_S + MARGIN_S

    # 500s that stop inside the deadline: retried, and the turn completes normally.
    before = proxy.errors_sent
    task = asyncio.create_task(asyncio.to_thread(_turn, base, "c-500-2"))
    await until(lambda: proxy.errors_sent > before, 60, "a 500 for the second turn")
    proxy.set_mode("forward")
    resp, _ = await task
    _assert_recovered(resp)

    resp, _ = _turn(base, "c-500-3")
    _assert_recovered(resp)
    await until(lambda: not intents_without_decision(store), 30, "a DECISION for every INTENT")
