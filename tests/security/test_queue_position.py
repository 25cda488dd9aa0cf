"""/status `llm.queue_position`: a tenant-scoped caller sees its own actors' positions in the
shared LLM queue (never another tenant's actor names); an operator sees every actor."""

from __future__ import annotations

import asyncio
import time
import uuid

from tests.security.conftest import bearer, make_key
from tests.stack import envelope, make_settings, running_stack
from turngate.temporal_client import connect


async def test_a_keyed_caller_sees_its_own_actors_queue_positions(tmp_path, temporal_server) -> None:
    # One provider slot and a slow echo: the turns wait in the LLM stage while we look.
    settings = make_settings(
        tmp_path, temporal_server.address, auth_mode="keys", echo_delay_ms=120_000, llm_concurrency=1
    )
    suffix = uuid.uuid4().hex[:8]  # the Temporal server is shared with other tests
    alice, bob = f"alice-{suffix}", f"bob-{suffix}"
    key_a = make_key(settings, f"tenant-a-{suffix}", "intent.write,snapshot.read")
    key_b = make_key(settings, f"tenant-b-{suffix}", "intent.write,snapshot.read")
    operator = make_key(settings, "*", "admin")
    started: list[str] = []
    async with running_stack(settings) as stack:
        for key, actor, cid in ((key_a, alice, "c-a"), (key_b, bob, "c-b"), (key_a, alice, "c-a2")):
            body = envelope("slow", correlation_id=cid, thread_id=f"t-{cid}", actor=actor)
            resp = await stack.http.post(
                "/ingress/intent", params={"wait": "decision"}, json=body, headers=bearer(key)
            )
            assert resp.status_code == 202, resp.text
            started.append(resp.json()["workflow_id"])
            await asyncio.sleep(0.05)  # distinct start times: positions follow submission order

        async def positions(key: str) -> dict[str, int]:
            status = (await stack.http.get("/status", headers=bearer(key))).json()
            return status["job_runtime"]["llm"]["queue_position"]

        def mine(seen: dict[str, int]) -> dict[str, int]:
            return {actor: n for actor, n in seen.items() if actor in (alice, bob)}

        try:
            deadline = time.monotonic() + 30
            while len(mine(await positions(operator))) < 2:  # visibility is eventually consistent
                assert time.monotonic() < deadline, await positions(operator)
                await asyncio.sleep(0.2)
            everyone = mine(await positions(operator))
            assert everyone[alice] < everyone[bob]  # alice's earliest turn came first
            assert await positions(key_a) == {alice: everyone[alice]}
            assert await positions(key_b) == {bob: everyone[bob]}
        finally:
            client = await connect(settings)
            for workflow_id in started:  # no 2-minute turns left behind for other tests
                await client.get_workflow_handle(workflow_id).terminate("test over")
