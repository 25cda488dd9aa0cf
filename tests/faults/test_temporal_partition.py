"""Partitions between turngate and Temporal's frontend (a :class:`PartitionProxy` frozen in front
of the dev server): the API refuses new intents promptly with 503 ``temporal.unavailable`` and
``Retry-After`` while streams of running turns go on; a worker cut off mid-turn says so on its
``/healthz``, reconnects by itself, and every turn ends once."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.faults.partition_proxy import PartitionProxy
from tests.faults.partitions import (
    duplicates,
    ended_once,
    outcomes,
    split_stack,
    twin_settings,
    until,
    verified,
)
from tests.processes import LONG_MESSAGE
from tests.stack import envelope
from turngate.devserver import free_port
from turngate.ledger import LedgerStore

RPC_BOUND_S = 1.0
#: Seconds past which a call is taken as hung (never a speed target: bench/faults.py measures that).
HANG_S = 60


@pytest.fixture
def proxy(temporal_server) -> Iterator[PartitionProxy]:
    host, _, port = temporal_server.address.rpartition(":")
    proxy = PartitionProxy((host, int(port)))
    try:
        yield proxy
    finally:
        proxy.close()


async def _stream_to_end(http: httpx.AsyncClient, correlation_id: str) -> list[str]:
    """A streamed turn's SSE event names, to its end."""
    names: list[str] = []
    body = envelope(LONG_MESSAGE, correlation_id=correlation_id)
    async with http.stream(
        "POST", "/ingress/intent", params={"stream": "true"}, json=body, timeout=60
    ) as resp:
        assert resp.status_code == 200, await resp.aread()
        async for line in resp.aiter_lines():
            if line.startswith("event:"):
                names.append(line.split(":", 1)[1].strip())
    return names


async def test_api_cut_off_from_temporal_refuses_promptly_and_streams_go_on(
    tmp_path, temporal_server, proxy: PartitionProxy
) -> None:
    side = twin_settings(tmp_path, temporal_server.address, echo_delay_ms=150)
    api = side(temporal_address=proxy.address, temporal_rpc_timeout_s=RPC_BOUND_S)
    worker = side()
    async with split_stack(api, worker) as stack:
        assert (await stack.chat("before", correlation_id="c-t-before")).status_code == 202
        streaming = asyncio.create_task(_stream_to_end(stack.http, "c-t-stream"))
        with LedgerStore(api.effective_ledger_url) as store:
            await until(lambda: len(store.by_correlation("c-t-stream")) == 2, 30, "the streamed turn running")
            proxy.freeze()
            # the code is the bound's (a wait that ran out would answer otherwise); how soon it
            # answers is measured by bench/faults.py, the timeout here only rules out a hang
            refused = await asyncio.wait_for(stack.chat("during", correlation_id="c-t-during"), HANG_S)
            assert refused.status_code == 503, refused.text
            assert refused.json()["reason_code"] == "temporal.unavailable"
            assert int(refused.headers["retry-after"]) >= 1
            health = await stack.http.get("/healthz")
            assert health.status_code == 503 and health.json()["reason_code"] == "temporal.unavailable"
            status = (await stack.http.get("/status")).json()
            assert status["temporal"]["reachable"] is False
            # The running turn's stream reads the ledger and the token bus, not Temporal: it ends.
            names = await asyncio.wait_for(streaming, 30)
            assert names[-1] == "done", names
            proxy.heal()
            retried = await _retry_until_accepted(stack.http, "c-t-during")
            assert retried["execution"]["payload"]["output_text"] == "echo: during"
            ids = ["c-t-before", "c-t-stream", "c-t-during"]
            assert ended_once(store, ids)
            assert outcomes(store, ids) == {"EXECUTION": 3}
            assert duplicates(store) == []
            assert verified(store)


async def _retry_until_accepted(
    http: httpx.AsyncClient, correlation_id: str, message: str = "during"
) -> dict:
    """What a client does with 503 and Retry-After: wait, resend the same intent."""
    deadline = time.monotonic() + 60
    while True:
        resp = await http.post(
            "/ingress/intent",
            params={"wait": "execution"},
            json=envelope(message, correlation_id=correlation_id),
        )
        if resp.status_code == 202:
            return resp.json()
        assert resp.status_code == 503 and time.monotonic() < deadline, resp.text
        await asyncio.sleep(float(resp.headers.get("retry-after", "1")))


async def test_worker_cut_off_from_temporal_mid_turn_reconnects_and_ends_every_turn_once(
    tmp_path, temporal_server, proxy: PartitionProxy
) -> None:
    """Turns inside their provider calls when the worker's road to Temporal freezes: the worker's
    /healthz says Temporal is unreachable; healed, it carries on by itself and each turn records
    one EXECUTION. bench/faults.py runs the same for 30 s and 3 min."""
    side = twin_settings(tmp_path, temporal_server.address, echo_delay_ms=150)
    bind = f"127.0.0.1:{free_port()}"
    api = side()
    worker = side(temporal_address=proxy.address, worker_metrics_bind=bind)
    ids = [f"c-w-{i}" for i in range(3)]
    async with split_stack(api, worker) as stack, httpx.AsyncClient(base_url=f"http://{bind}") as probe:
        with LedgerStore(api.effective_ledger_url) as store:
            for correlation_id in ids:
                resp = await stack.chat(LONG_MESSAGE, correlation_id=correlation_id, wait="decision")
                assert resp.status_code == 202, resp.text
            proxy.freeze()
            deadline = time.monotonic() + 20
            while True:  # the worker checks every 5 s, each check bounded by 5 s
                health = await probe.get("/healthz")
                if health.status_code == 503:
                    break
                assert time.monotonic() < deadline, "the worker never reported Temporal unreachable"
                await asyncio.sleep(0.5)
            assert json.loads(health.text)["reason_code"] == "temporal.unavailable"
            proxy.heal()
            await until(lambda: ended_once(store, ids), 90, "every turn to end after healing")
            assert outcomes(store, ids) == {"EXECUTION": len(ids)}
            resp = await stack.chat("after", correlation_id="c-w-after")
            assert resp.json()["execution"]["payload"]["output_text"] == "echo: after"
            assert duplicates(store) == []
            assert verified(store)


async def test_a_start_whose_answer_is_lost_is_recorded_once_when_the_client_retries(
    tmp_path, temporal_server, proxy: PartitionProxy
) -> None:
    """The partition swallows Temporal's answer to a start that took effect: the client gets 503
    ``temporal.unavailable`` although its turn runs. Healed, the same intent sent again attaches
    to that turn: one INTENT, one EXECUTION."""
    side = twin_settings(tmp_path, temporal_server.address)
    api = side(temporal_address=proxy.address, temporal_rpc_timeout_s=RPC_BOUND_S)
    async with split_stack(api, side()) as stack:
        assert (await stack.chat("warm", correlation_id="c-lost-warm")).status_code == 202
        proxy.freeze(replies_only=True)
        refused = await stack.chat("lost", correlation_id="c-lost", wait=None)
        assert refused.status_code == 503 and refused.json()["reason_code"] == "temporal.unavailable"
        with LedgerStore(api.effective_ledger_url) as store:
            # The start reached Temporal: the worker (on its own road) runs the turn meanwhile.
            await until(lambda: ended_once(store, ["c-lost"]), 30, "the turn whose answer was lost")
            proxy.heal()
            retried = await _retry_until_accepted(stack.http, "c-lost", "lost")
            assert retried["execution"]["payload"]["output_text"] == "echo: lost"
            kinds = [str(e.kind) for e in store.by_correlation("c-lost")]
            assert kinds == ["INTENT", "DECISION", "EXECUTION"]
            assert duplicates(store) == []
            assert verified(store)
