"""Two tenants race on the same thread and turn ids while the worker is paused.

The API's admission check reads the ledger, which holds nothing until the worker records the
INTENT: with the one `turngate worker` process stopped (SIGSTOP, as a GC pause, CPU starvation
or a backlog would), both tenants' requests pass it. A turn's identity includes its tenant (the
workflow id, the API's wait, dedupe), and the ledger claims a thread for the first tenant it
records there: exactly one tenant's turn runs, the other gets 409
``admission.correlation_conflict``, and neither ever sees the other's message or answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

import httpx
import pytest

from tests.processes import spawn
from tests.security.conftest import bearer, make_key
from tests.stack import envelope, make_settings, running_stack
from turngate.ledger import LedgerStore
from turngate.temporal_client import connect
from turngate.worker.pollers import polling_pids

ROLES = "intent.write,snapshot.read"
THREAD, TURN = "shared-thread", "shared-turn"
#: How long the worker stays stopped with both requests waiting.
PAUSE_S = 3.0


async def _started(client: Any, query: str) -> bool:
    return [w async for w in client.list_workflows(query)] != []


@pytest.mark.parametrize("first", ["alice", "bob"])
async def test_two_tenants_on_the_same_turn_ids_never_share_the_turn(
    tmp_path, temporal_server, first
) -> None:
    settings = make_settings(tmp_path, temporal_server.address, auth_mode="keys", wait_timeout_s=30.0)
    keys = {tenant: await asyncio.to_thread(make_key, settings, tenant, ROLES) for tenant in ("alice", "bob")}
    messages = {"alice": "alice's private question", "bob": "bob's attempt at the same ids"}
    worker = spawn(["worker"], settings, tmp_path / "worker.log")
    client = await connect(settings)
    try:
        for _ in range(600):
            if worker.pid in await polling_pids(client, settings.turns_task_queue):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the worker never polled")
        async with running_stack(settings, worker=False) as stack:

            async def post(tenant: str) -> httpx.Response:
                body = envelope(
                    messages[tenant], correlation_id=f"c-{tenant}", thread_id=THREAD, turn_id=TURN
                )
                return await stack.http.post(
                    "/ingress/intent", params={"wait": "execution"}, json=body, headers=bearer(keys[tenant])
                )

            second = "bob" if first == "alice" else "alice"
            os.kill(worker.pid, signal.SIGSTOP)
            try:
                requests = {first: asyncio.create_task(post(first))}
                query = f"WorkflowId STARTS_WITH '{settings.workflow_id_prefix}/'"
                for _ in range(100):  # the first tenant's turn is started (nothing is recorded)
                    if await _started(client, query):
                        break
                    await asyncio.sleep(0.05)
                requests[second] = asyncio.create_task(post(second))
                await asyncio.sleep(PAUSE_S)
            finally:
                os.kill(worker.pid, signal.SIGCONT)
            answers = {tenant: await task for tenant, task in requests.items()}

        statuses = sorted(answer.status_code for answer in answers.values())
        assert statuses == [202, 409], {t: (a.status_code, a.text) for t, a in answers.items()}
        winner = next(t for t, a in answers.items() if a.status_code == 202)
        loser = next(t for t in answers if t != winner)
        won, lost = answers[winner].json(), answers[loser].json()
        # The winner's own turn, whole: its message decided, its answer recorded.
        assert won["deduplicated"] is False and won["correlation_id"] == f"c-{winner}"
        assert won["execution"]["payload"]["output_text"] == f"echo: {messages[winner]}"
        assert won["execution"]["tenant_id"] == winner
        # The loser: a clear refusal that names nothing of the winner's turn.
        assert lost["reason_code"] == "admission.correlation_conflict"
        assert lost["field"] == "payload.thread_id"
        assert messages[winner] not in json.dumps(lost) and f"c-{winner}" not in json.dumps(lost)

        with LedgerStore(settings.effective_ledger_url) as store:
            recorded = store.turn_events(THREAD, TURN)
            assert {(str(e.kind), e.tenant_id, e.correlation_id) for e in recorded} == {
                (kind, winner, f"c-{winner}") for kind in ("INTENT", "DECISION", "EXECUTION")
            }
            assert store.by_correlation(f"c-{loser}") == []

        # The loser's own view of the ledger holds nothing of it; its next turn elsewhere runs.
        async with running_stack(settings, worker=False) as stack:
            seen = await stack.http.get("/snapshot", params={"limit": 100}, headers=bearer(keys[loser]))
            assert seen.json()["events"] == []
            again = await stack.http.post(
                "/ingress/intent",
                params={"wait": "execution"},
                json=envelope("my own thread", correlation_id=f"c-{loser}-2", thread_id=f"{loser}-own"),
                headers=bearer(keys[loser]),
            )
            assert again.status_code == 202, again.text
            assert again.json()["execution"]["payload"]["output_text"] == "echo: my own thread"
    finally:
        if worker.poll() is None:
            os.kill(worker.pid, signal.SIGCONT)
            worker.terminate()
            worker.wait(30)


async def test_an_unscoped_caller_cannot_join_a_tenants_turn(tmp_path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address, auth_mode="keys")
    tenant = await asyncio.to_thread(make_key, settings, "acme", ROLES)
    operator = await asyncio.to_thread(make_key, settings, "*", "admin")
    async with running_stack(settings) as stack:
        mine = envelope("acme's question", correlation_id="c-acme", thread_id="t-acme", turn_id="u-1")
        first = await stack.http.post(
            "/ingress/intent", params={"wait": "execution"}, json=mine, headers=bearer(tenant)
        )
        assert first.status_code == 202
        same_ids = envelope("operator", correlation_id="c-op", thread_id="t-acme", turn_id="u-1")
        refused = await stack.http.post(
            "/ingress/intent", params={"wait": "execution"}, json=same_ids, headers=bearer(operator)
        )
        assert refused.status_code == 409
        assert (refused.json()["reason_code"], refused.json()["field"]) == (
            "admission.correlation_conflict",
            "payload.turn_id",
        )
        # its correlation id too
        again = envelope("operator", correlation_id="c-acme", thread_id="t-op", turn_id="u-1")
        refused = await stack.http.post("/ingress/intent", json=again, headers=bearer(operator))
        assert refused.status_code == 409 and refused.json()["field"] == "correlation_id"
        # a turn of its own in that thread is still an operator's to record
        own = envelope("operator note", correlation_id="c-op2", thread_id="t-acme", turn_id="u-op")
        done = await stack.http.post("/ingress/intent", json=own, headers=bearer(operator))
        assert done.status_code == 202, done.text
