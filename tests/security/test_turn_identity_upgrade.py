"""Turns started under the workflow id format without the tenant (an earlier version, an
upgrade with turns in flight) keep working: a resubmitted turn attaches to its running workflow
instead of starting a second one, and the UI's turn page links to the workflow that exists."""

from __future__ import annotations

import asyncio

from tests.processes import LONG_MESSAGE
from tests.security.conftest import bearer, make_key
from tests.stack import envelope, make_settings, running_stack
from turngate.core.events import IntentPrincipal, parse_intent
from turngate.ledger import LedgerStore
from turngate.temporal_client import connect
from turngate.workflows.shared import TurnInput, legacy_turn_workflow_id, turn_workflow_id
from turngate.workflows.turn import TurnWorkflow

ROLES = "intent.write,snapshot.read"


async def test_a_turn_running_under_the_older_id_is_joined_not_run_again(tmp_path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address, echo_delay_ms=250, auth_mode="keys")
    secret = await asyncio.to_thread(make_key, settings, "acme", ROLES)
    body = envelope(LONG_MESSAGE, correlation_id="c-old", thread_id="t-upgrade", turn_id="u-1")
    intent = parse_intent(body, max_message_bytes=10_000, max_refs=10, max_tools=10)
    intent = intent.model_copy(update={"principal": IntentPrincipal(tenant_id="acme", key_id="k-old")})
    legacy = legacy_turn_workflow_id("default", "t-upgrade", "u-1", settings.workflow_id_prefix)
    client = await connect(settings)
    async with running_stack(settings) as stack:
        # What the earlier version's API did: the turn's workflow under the id without the tenant.
        handle = await client.start_workflow(
            TurnWorkflow.run, TurnInput(envelope=intent), id=legacy, task_queue=settings.turns_task_queue
        )
        with LedgerStore(settings.effective_ledger_url) as store:
            for _ in range(200):
                if store.by_correlation("c-old"):
                    break
                await asyncio.sleep(0.05)
            # The client retries the request while the answer streams.
            answer = await stack.http.post(
                "/ingress/intent", params={"wait": "execution"}, json=body, headers=bearer(secret)
            )
            assert answer.status_code == 202, answer.text
            found = answer.json()
            assert found["workflow_id"] == legacy and found["correlation_id"] == "c-old"
            assert found["execution"]["payload"]["output_text"] == f"echo: {LONG_MESSAGE}"
            await handle.result()
            assert [str(e.kind) for e in store.turn_events("t-upgrade", "u-1")] == [
                "INTENT",
                "DECISION",
                "EXECUTION",
            ]
        # Nothing ran under the current id.
        current = turn_workflow_id(
            "default", "t-upgrade", "u-1", settings.workflow_id_prefix, tenant_id="acme"
        )
        assert [w async for w in client.list_workflows(f"WorkflowId = '{current}'")] == []
        # The UI's turn page links to the workflow that exists.
        page = await stack.http.get(
            "/ui/api/turn", params={"correlation_id": "c-old"}, headers=bearer(secret)
        )
        assert page.json()["summary"]["workflow"]["workflow_id"] == legacy

        # A new turn runs under the current id, and its page links there.
        fresh = envelope("hello", correlation_id="c-new", thread_id="t-upgrade", turn_id="u-2")
        done = await stack.http.post(
            "/ingress/intent", params={"wait": "execution"}, json=fresh, headers=bearer(secret)
        )
        new_id = turn_workflow_id(
            "default", "t-upgrade", "u-2", settings.workflow_id_prefix, tenant_id="acme"
        )
        assert done.json()["workflow_id"] == new_id
        page = await stack.http.get(
            "/ui/api/turn", params={"correlation_id": "c-new"}, headers=bearer(secret)
        )
        assert page.json()["summary"]["workflow"]["workflow_id"] == new_id
