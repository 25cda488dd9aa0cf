"""End to end over HTTP against a real Temporal dev server, worker and ledger."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.stack import envelope, make_settings, running_stack
from turngate.ledger import LedgerStore, verify_ledger


def kinds(snapshot: dict) -> list[str]:
    return [e["kind"] for e in snapshot["events"]]


async def test_chat_roundtrip_records_a_verifiable_chain(settings) -> None:
    async with running_stack(settings) as stack:
        resp = await stack.chat("hello there", correlation_id="c-1")
        assert resp.status_code == 202, resp.text
        body = resp.json()
        assert body["accepted"] is True and body["index"] == 0
        assert body["workflow_id"].startswith(f"{settings.workflow_id_prefix}/-/default/c-1/c-1/")
        assert body["decision"]["payload"]["decision"] == "ALLOW"
        execution = body["execution"]["payload"]
        assert execution["output_text"] == "echo: hello there"
        assert execution["provider"] == "echo"
        snap = (await stack.http.get("/snapshot")).json()
        assert kinds(snap) == ["INTENT", "DECISION", "EXECUTION"]
        assert [e["index"] for e in snap["events"]] == [0, 1, 2]
        assert snap["events"][1]["prev_event_digest"] == snap["events"][0]["digest"]
        assert snap["v_digest"] == snap["events"][2]["digest"]
        assert all(isinstance(e["canon_len"], int) for e in snap["events"])
    store = LedgerStore(settings.effective_ledger_url)
    assert verify_ledger(store).ok
    store.close()


async def test_intent_ack_without_wait(settings) -> None:
    async with running_stack(settings) as stack:
        resp = await stack.chat("quick", correlation_id="c-ack", wait=None)
        body = resp.json()
        assert resp.status_code == 202 and body["index"] == 0
        assert "decision" not in body


async def test_same_turn_twice_is_one_chain(settings) -> None:
    async with running_stack(settings) as stack:
        first = (await stack.chat("once", correlation_id="c-a", thread_id="t", turn_id="1")).json()
        again = (await stack.chat("once", correlation_id="c-b", thread_id="t", turn_id="1")).json()
        same = (await stack.chat("once", correlation_id="c-a", thread_id="t", turn_id="1")).json()
        assert first["correlation_id"] == again["correlation_id"] == same["correlation_id"] == "c-a"
        assert first["index"] == again["index"] == same["index"]
        assert again["deduplicated"] is True
        assert kinds((await stack.http.get("/snapshot")).json()) == ["INTENT", "DECISION", "EXECUTION"]


async def test_concurrent_duplicate_submissions_run_once(settings) -> None:
    async with running_stack(settings) as stack:
        responses = await asyncio.gather(
            *(stack.chat("dup", correlation_id=f"c-{i}", thread_id="t", turn_id="x") for i in range(5))
        )
        assert len({r.json()["correlation_id"] for r in responses}) == 1
        assert len((await stack.http.get("/snapshot")).json()["events"]) == 3


async def test_correlation_id_reused_for_another_turn_is_refused(settings) -> None:
    async with running_stack(settings) as stack:
        await stack.chat("one", correlation_id="c-x", thread_id="t", turn_id="1")
        resp = await stack.chat("two", correlation_id="c-x", thread_id="t", turn_id="2")
        assert resp.status_code == 409
        assert resp.json()["reason_code"] == "admission.correlation_conflict"
        assert len((await stack.http.get("/snapshot")).json()["events"]) == 3


async def test_observer_mode_denies_without_execution(tmp_path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address, policy_module=None)
    async with running_stack(settings) as stack:
        body = (await stack.chat("hi", correlation_id="c-obs")).json()
        assert body["decision"]["payload"]["decision"] == "DENY"
        assert body["decision"]["payload"]["reason_codes"] == ["gateway.observer_mode"]
        assert "execution" not in body
        assert kinds((await stack.http.get("/snapshot")).json()) == ["INTENT", "DECISION"]


async def test_refs_resolve_governance_and_execution_only(settings) -> None:
    async with running_stack(settings) as stack:
        await stack.chat("What is 2+2?", correlation_id="c-1", thread_id="t")
        resp = await stack.chat(
            "Explain more",
            correlation_id="c-2",
            thread_id="t",
            parent_turn_id="c-1",
            declared_refs=[
                {"ref_type": "execution", "ref_id": "c-1"},
                {"ref_type": "event", "ref_id": "c-1"},
            ],
        )
        decision = resp.json()["decision"]["payload"]
        assert decision["decision"] == "ALLOW"
        admitted = [(r["event_kind"], r["admitted_for"]) for r in decision["resolved_refs"]]
        assert admitted == [("INTENT", "governance"), ("EXECUTION", "execution_only")]
        snap = (await stack.http.get("/snapshot", params={"thread_id": "t"})).json()
        assert decision["normative_input_digests"] == [snap["events"][0]["digest"]]
        assert decision["boundary"]["context_config_digest"].startswith("sha256:")
        assert resp.json()["execution"]["payload"]["output_text"] == "echo: Explain more"


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({"declared_refs": [{"ref_type": "event", "ref_id": "nope"}]}, "REF_NOT_FOUND"),
        ({"declared_refs": [{"ref_type": "event", "ref_id": "c-other"}]}, "CROSS_THREAD_REF"),
        ({"declared_refs": [{"ref_id": f"r{i}"} for i in range(51)]}, "MAX_REFS_EXCEEDED"),
    ],
)
async def test_ref_errors_end_in_a_recorded_deny(settings, payload, code) -> None:
    async with running_stack(settings) as stack:
        await stack.chat("elsewhere", correlation_id="c-other", thread_id="other")
        body = (await stack.chat("hi", correlation_id="c-ref", thread_id="t", **payload)).json()
        decision = body["decision"]["payload"]
        assert decision["decision"] == "DENY"
        assert code in decision["reason_codes"]
        snap = (await stack.http.get("/snapshot", params={"thread_id": "t"})).json()
        assert kinds(snap) == ["INTENT", "DECISION"]


async def test_continuing_a_thread_with_no_refs_ends_in_a_recorded_deny(settings) -> None:
    async with running_stack(settings) as stack:
        await stack.chat("first", correlation_id="c-first", thread_id="t")
        body = (
            await stack.chat(
                "hi", correlation_id="c-ref", thread_id="t", parent_turn_id="c-first", declared_refs=[]
            )
        ).json()
        decision = body["decision"]["payload"]
        assert (decision["decision"], decision["reason_codes"]) == ("DENY", ["EMPTY_REFS_DENIED"])
        snap = (await stack.http.get("/snapshot", params={"thread_id": "t"})).json()
        assert kinds(snap) == ["INTENT", "DECISION", "EXECUTION", "INTENT", "DECISION"]


BAD_BODIES = [
    (b"{not json", 400, "admission.malformed_json"),
    (json.dumps({"interface_version": 3, "correlation_id": 7, "payload": {}}), 422, "admission.invalid_type"),
    (
        json.dumps(envelope("x", correlation_id="c") | {"interface_version": 2}),
        422,
        "admission.unsupported_interface_version",
    ),
    (
        json.dumps(
            {
                "interface_version": 3,
                "correlation_id": "c",
                "payload": {"intent_type": "chat.message", "payload": {}},
            }
        ),
        422,
        "admission.missing_field",
    ),
    (json.dumps(envelope("   ", correlation_id="c")), 422, "admission.empty_message"),
    (
        json.dumps(
            {
                "interface_version": 3,
                "correlation_id": "c",
                "payload": {"intent_type": "chat.shout", "payload": {"message": "x"}},
            }
        ),
        422,
        "admission.unknown_intent_type",
    ),
    (json.dumps(envelope("x", correlation_id="c", declared_refs="c-1")), 422, "admission.invalid_type"),
    (json.dumps(envelope("x" * 300_000, correlation_id="c")), 413, "admission.payload_too_large"),
    (json.dumps(envelope("x" * 2_000_000, correlation_id="c")), 413, "admission.payload_too_large"),
]


async def test_bad_input_gets_a_clear_4xx_and_records_nothing(settings) -> None:
    async with running_stack(settings) as stack:
        for body, status, code in BAD_BODIES:
            resp = await stack.http.post(
                "/ingress/intent", content=body, headers={"content-type": "application/json"}
            )
            assert resp.status_code == status, (code, resp.text)
            assert resp.json()["reason_code"] == code
            assert resp.json()["ok"] is False
        snap = (await stack.http.get("/snapshot")).json()
        assert snap["length"] == 0


async def test_wall_clock_timeout_records_llm_timeout(tmp_path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address, llm_wall_clock_s=1, echo_delay_ms=400)
    async with running_stack(settings) as stack:
        body = (await stack.chat("one two three four five six", correlation_id="c-slow")).json()
        error = body["execution"]["payload"]["error"]
        assert error["code"] == "llm.timeout"
        assert error["provider"] == "echo"


async def test_tail_streams_backlog_and_live_events(settings) -> None:
    async with running_stack(settings) as stack:
        await stack.chat("first", correlation_id="c-1")
        seen: list[dict] = []

        async def read_tail() -> None:
            async with stack.http.stream("GET", "/tail", params={"backlog": 10}) as resp:
                event_id = None
                async for line in resp.aiter_lines():
                    if line.startswith("id:"):
                        event_id = int(line[3:].strip())
                    if line.startswith("data:"):
                        record = json.loads(line[5:])
                        assert record["index"] == event_id
                        seen.append(record)
                        if len(seen) == 6:
                            return

        reader = asyncio.create_task(read_tail())
        await asyncio.sleep(0.2)
        await stack.chat("second", correlation_id="c-2")
        await asyncio.wait_for(reader, 10)
        assert [e["index"] for e in seen] == [0, 1, 2, 3, 4, 5]

        # Resume after Last-Event-ID: only what came later.
        async with stack.http.stream("GET", "/tail", headers={"Last-Event-ID": "4"}) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data:"):
                    assert json.loads(line[5:])["index"] == 5
                    break


async def test_snapshot_filters_and_positional_offset(settings) -> None:
    async with running_stack(settings) as stack:
        await stack.chat("a", correlation_id="c-1", thread_id="t1")
        await stack.chat("b", correlation_id="c-2", thread_id="t2")
        page = (await stack.http.get("/snapshot", params={"thread_id": "t2", "offset": 1, "limit": 1})).json()
        assert page["length"] == 3 and page["offset"] == 1
        assert [e["kind"] for e in page["events"]] == ["DECISION"]
        bad = await stack.http.get("/snapshot", params={"limit": 0})
        assert bad.status_code == 422 and bad.json()["reason_code"] == "request.invalid_parameter"


async def test_status_capabilities_health(settings) -> None:
    async with running_stack(settings) as stack:
        await stack.chat("x", correlation_id="c-1")
        caps = (await stack.http.get("/capabilities")).json()
        assert caps["interface_version"] == 3
        assert "echo" in [p["name"] for p in caps["providers"]["providers"]]
        assert caps["config_digests"]["context_config_digest"].startswith("sha256:")
        status = (await stack.http.get("/status")).json()
        assert status["ledger"]["length"] == 3
        assert status["job_runtime"]["llm"]["concurrency"] == 16  # the default
        health = await stack.http.get("/healthz")
        assert health.status_code == 200 and health.json()["ok"] is True
        assert (await stack.http.get("/openapi.json")).status_code == 200


async def test_verify_endpoint_for_the_ledger_and_a_thread(settings) -> None:
    async with running_stack(settings) as stack:
        await stack.chat("a", correlation_id="c-1", thread_id="t1")
        await stack.chat("b", correlation_id="c-2", thread_id="t2")
        whole = (await stack.http.get("/verify")).json()
        assert whole["ok"] is True and whole["checked_events"] == 6 and whole["checked_decisions"] == 2
        thread = (await stack.http.get("/verify", params={"thread_id": "t2"})).json()
        assert thread["ok"] is True and thread["checked_events"] == 3
