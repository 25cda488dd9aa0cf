"""Tenant isolation end to end: tenant B cannot read, tail, stream, reference, verify or even
detect tenant A's data; A's INTENT records who declared it (tenant, key id), never the secret."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from tests.security.conftest import bearer, make_key
from tests.stack import envelope, running_stack
from turngate.ledger import LedgerStore
from turngate.settings import Settings


async def _chat(
    http: httpx.AsyncClient, key: str, message: str, cid: str, **payload: object
) -> httpx.Response:
    return await http.post(
        "/ingress/intent",
        params={"wait": "execution"},
        json=envelope(message, correlation_id=cid, **payload),
        headers=bearer(key),
    )


async def _tail_events(http: httpx.AsyncClient, key: str, backlog: int) -> AsyncIterator[dict[str, Any]]:
    """The events of this key's /tail, as they come."""
    async with http.stream("GET", "/tail", params={"backlog": backlog}, headers=bearer(key)) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.startswith("data:"):
                yield json.loads(line[5:])


async def _tail(http: httpx.AsyncClient, key: str, seconds: float = 1.5) -> list[dict[str, Any]]:
    """The /tail backlog this key sees within ``seconds``."""
    found: list[dict[str, Any]] = []

    async def read() -> None:
        async for event in _tail_events(http, key, backlog=100):
            found.append(event)

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(read(), seconds)
    return found


async def test_a_live_tail_carries_only_the_callers_tenant(secure_settings: Settings) -> None:
    """Live events (read from the API's memory of the ledger's head, not a query): B's open
    /tail gets B's new turn and nothing of A's, turns of both running meanwhile."""
    key_a = make_key(secure_settings, "tenant-a", "intent.write,snapshot.read")
    key_b = make_key(secure_settings, "tenant-b", "intent.write,snapshot.read")
    async with running_stack(secure_settings) as stack:
        http = stack.http
        found: list[dict[str, Any]] = []

        async def read() -> None:
            async for event in _tail_events(http, key_b, backlog=0):
                found.append(event)
                if event["kind"] == "EXECUTION" and event["correlation_id"] == "c-b2":
                    return

        tail = asyncio.create_task(read())
        await asyncio.sleep(0.3)  # the stream is open before the turns start
        try:
            for key, cid in ((key_a, "c-a2"), (key_b, "c-b2"), (key_a, "c-a3")):
                response = await _chat(http, key, f"live {cid}", cid, thread_id=f"thread-{cid}")
                assert response.status_code == 202, response.text
            await asyncio.wait_for(tail, 30)
        finally:
            tail.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await tail
    assert {e["tenant_id"] for e in found} == {"tenant-b"}
    assert [e["kind"] for e in found if e["correlation_id"] == "c-b2"] == ["INTENT", "DECISION", "EXECUTION"]


async def test_tenant_b_sees_nothing_of_tenant_a(secure_settings: Settings) -> None:
    key_a = make_key(secure_settings, "tenant-a", "intent.write,snapshot.read")
    key_b = make_key(secure_settings, "tenant-b", "intent.write,snapshot.read")
    operator = make_key(secure_settings, "*", "admin")
    async with running_stack(secure_settings) as stack:
        http = stack.http
        a1 = await _chat(http, key_a, "secret plans of a", "c-a1", thread_id="thread-a")
        assert a1.status_code == 202, a1.text
        assert a1.json()["execution"]["payload"]["output_text"] == "echo: secret plans of a"
        b1 = await _chat(http, key_b, "hello from b", "c-b1", thread_id="thread-b")
        assert b1.status_code == 202, b1.text

        # read: /snapshot shows only B's own events, whatever the filters
        snap = (await http.get("/snapshot", headers=bearer(key_b))).json()
        assert snap["length"] == 3 and {e["tenant_id"] for e in snap["events"]} == {"tenant-b"}
        foreign = (
            await http.get("/snapshot", params={"thread_id": "thread-a"}, headers=bearer(key_b))
        ).json()
        assert foreign["length"] == 0 and foreign["events"] == []
        everything = (await http.get("/snapshot", headers=bearer(operator))).json()
        assert everything["length"] == 6

        # tail: only B's events
        tailed = await _tail(http, key_b)
        assert tailed and {e["tenant_id"] for e in tailed} == {"tenant-b"}

        # stream: A's turn does not exist for B (same answer as an unknown id)
        for cid in ("c-a1", "c-unknown"):
            stream = await http.get(f"/turns/{cid}/stream", headers=bearer(key_b), timeout=30)
            assert stream.status_code == 404 and stream.json()["reason_code"] == "turn.not_found"

        # reference: a ref to A's turn is REF_NOT_FOUND, exactly like a ref to nothing
        denied = {}
        for ref in ("c-a1", "c-nothing"):
            resp = await _chat(
                http,
                key_b,
                "what did a say?",
                f"c-b-ref-{ref}",
                thread_id="thread-b",
                turn_id=f"t-{ref}",
                declared_refs=[{"ref_type": "event", "ref_id": ref}],
            )
            decision = resp.json()["decision"]["payload"]
            assert decision["decision"] == "DENY"
            denied[ref] = decision
        assert denied["c-a1"]["reason_codes"] == denied["c-nothing"]["reason_codes"] == ["REF_NOT_FOUND"]
        assert denied["c-a1"]["error"]["code"] == "REF_NOT_FOUND"
        a_digest = a1.json()["execution"]["digest"]
        by_digest = await _chat(
            http,
            key_b,
            "and now?",
            "c-b-digest",
            thread_id="thread-b",
            turn_id="t-digest",
            declared_refs=[{"ref_type": "event", "ref_id": a_digest}],
        )
        assert by_digest.json()["decision"]["payload"]["reason_codes"] == ["REF_NOT_FOUND"]

        # verify: A's thread answers like a thread that does not exist; whole-ledger needs an operator
        theirs = (await http.get("/verify", params={"thread_id": "thread-a"}, headers=bearer(key_b))).json()
        nothing = (await http.get("/verify", params={"thread_id": "no-such"}, headers=bearer(key_b))).json()
        assert theirs["checked_events"] == nothing["checked_events"] == 0
        assert theirs["thread_id"] == "thread-a"
        mine = (await http.get("/verify", params={"thread_id": "thread-b"}, headers=bearer(key_b))).json()
        assert mine["thread_id"] == "thread-b" and mine["checked_events"] == 9
        whole = await http.get("/verify", headers=bearer(key_b))
        assert whole.status_code == 422 and whole.json()["reason_code"] == "verify.thread_required"

        # ids: reusing A's correlation id or thread is refused without naming anything of A's
        reuse = await _chat(http, key_b, "x", "c-a1", thread_id="thread-b", turn_id="t-x")
        assert reuse.status_code == 409 and "thread-a" not in reuse.text
        join = await _chat(http, key_b, "x", "c-b-join", thread_id="thread-a")
        assert join.status_code == 409 and "c-a1" not in join.text

        # status: no foreign actor names for a scoped caller
        status = (await http.get("/status", headers=bearer(key_b))).json()
        assert status["job_runtime"]["llm"]["queue_position"] == {}

    # The INTENT records who declared it; every event of the turn carries the tenant.
    with LedgerStore(secure_settings.effective_ledger_url) as ledger:
        events = ledger.by_correlation("c-a1")
    intent = events[0]
    assert intent.payload["principal"]["tenant_id"] == "tenant-a"
    assert intent.payload["principal"]["key_id"]
    assert {e.tenant_id for e in events} == {"tenant-a"}
    assert key_a not in json.dumps([e.model_dump(mode="json") for e in events])


async def test_a_body_cannot_claim_a_principal(secure_settings: Settings) -> None:
    key = make_key(secure_settings, "tenant-a", "intent.write")
    async with running_stack(secure_settings) as stack:
        body = envelope("hi", correlation_id="c-claim")
        body["principal"] = {"tenant_id": "tenant-b", "key_id": "forged"}
        resp = await stack.http.post(
            "/ingress/intent", params={"wait": "decision"}, json=body, headers=bearer(key)
        )
        assert resp.status_code == 202, resp.text
    with LedgerStore(secure_settings.effective_ledger_url) as ledger:
        [intent, *_] = ledger.by_correlation("c-claim")
    assert intent.tenant_id == "tenant-a"
    assert intent.payload["principal"]["tenant_id"] == "tenant-a"
    assert intent.payload["principal"]["key_id"] != "forged"


async def test_verify_recomputes_a_cross_tenant_ref_as_not_found(secure_settings: Settings) -> None:
    key_a = make_key(secure_settings, "tenant-a", "intent.write,snapshot.read")
    key_b = make_key(secure_settings, "tenant-b", "intent.write,snapshot.read")
    async with running_stack(secure_settings) as stack:
        await _chat(stack.http, key_a, "a", "c-a1", thread_id="thread-a")
        await _chat(
            stack.http,
            key_b,
            "b",
            "c-b1",
            thread_id="thread-b",
            declared_refs=[{"ref_type": "event", "ref_id": "c-a1"}],
        )
        mine = (
            await stack.http.get("/verify", params={"thread_id": "thread-b"}, headers=bearer(key_b))
        ).json()
    assert mine["ok"] is True, mine["failures"]
