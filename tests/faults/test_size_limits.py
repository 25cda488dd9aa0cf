"""No raw blob over 64 KiB in the ledger or in a Temporal history (real stack, real Temporal).

Limits are tested at, just under and just over their boundary, in bytes (not characters), with
multibyte text: the INTENT payload limit (64 KiB, canonical JSON), the inline text limit of a
message (16 KiB, UTF-8), and `turngate verify`'s check of stored payloads.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes import fake_openai
from tests.faults.size_helpers import history_of, history_payloads, offloaded, run_verify
from tests.stack import envelope, make_settings, running_stack
from turngate.artifacts import open_artifact_store
from turngate.artifacts.temporal_codec import PAYLOAD_LIMIT_BYTES
from turngate.core.canonical import canonical_bytes
from turngate.core.events import EventDraft, EventKind, parse_intent
from turngate.core.limits import EVENT_PAYLOAD_LIMIT_BYTES, TEXT_INLINE_LIMIT_BYTES, payload_size
from turngate.ledger import LedgerStore
from turngate.temporal_client import connect
from turngate.workflows.shared import CallAndRecordInput

LIMIT = EVENT_PAYLOAD_LIMIT_BYTES


def test_the_limits_are_the_documented_ones() -> None:
    assert (EVENT_PAYLOAD_LIMIT_BYTES, TEXT_INLINE_LIMIT_BYTES) == (65_536, 16_384)
    assert PAYLOAD_LIMIT_BYTES == 65_536


def intent_size(body: dict[str, Any]) -> int:
    """The INTENT payload size the gateway will store for ``body`` (no principal in dev mode)."""
    return payload_size(parse_intent(body, max_message_bytes=10**7).intent_event_payload())


def padded(body_for: Any, target: int, *, unit: str = "a") -> dict[str, Any]:
    """``body_for(pad)`` with a pad string whose INTENT payload is exactly ``target`` bytes;
    ``unit`` is repeated (a multibyte unit is topped up with ASCII to land exactly)."""
    base = intent_size(body_for(""))
    width = len(unit.encode())
    count, rest = divmod(target - base, width)
    body = body_for(unit * count + "a" * rest)
    assert intent_size(body) == target
    return body


def events_of(snapshot: dict[str, Any], correlation_id: str) -> list[dict[str, Any]]:
    return [e for e in snapshot["events"] if e["correlation_id"] == correlation_id]


async def test_a_1_mib_turn_with_a_100k_token_context_keeps_history_and_ledger_under_64_kib(
    tmp_path, temporal_server
) -> None:
    chunk = ("word " * 6000).strip()  # 29,999 bytes: each earlier message is offloaded (> 16 KiB)
    message = ("mega " * 52_000).strip()  # 259,999 bytes: the largest message admitted (256 KiB)
    attachment = "ą" * 400_000  # 800,000 bytes of an opaque body field: the request is > 1 MiB
    with fake_openai("noted") as server:
        settings = make_settings(
            tmp_path,
            temporal_server.address,
            max_body_bytes=2_000_000,
            token_budget=250_000,
            openai_api_key="sk-test-size-0123456789",
            openai_base_url=server.base_url,
            default_provider="openai",
        )
        async with running_stack(settings) as stack:
            for n in range(10):
                earlier = await stack.chat(f"{n} {chunk}", correlation_id=f"c-{n}", thread_id="t")
                assert earlier.json()["execution"]["payload"]["output_text"] == "noted"
            refs = [
                ref
                for n in range(10)
                for ref in ({"ref_id": f"c-{n}"}, {"ref_type": "execution", "ref_id": f"c-{n}"})
            ]
            body = envelope(
                message,
                correlation_id="c-big",
                thread_id="t",
                parent_turn_id="c-9",
                declared_refs=refs,
                inputs={"note": "small inputs stay inline"},
            )
            body["payload"]["payload"]["attachment"] = attachment
            text = json.dumps(body, ensure_ascii=False)
            assert len(text.encode()) > 1024 * 1024
            answer = await stack.http.post("/ingress/intent", params={"wait": "execution"}, content=text)
            assert answer.status_code == 202, answer.text
            snapshot = (await stack.http.get("/snapshot", params={"limit": 1000})).json()
        sent = server.last_request.json["messages"]
    result = answer.json()
    assert result["decision"]["payload"]["decision"] == "ALLOW"
    assert "error" not in result["execution"]["payload"]

    # The provider activity got pointers and loaded every offloaded text itself: the request to
    # the provider holds the whole current message and every earlier message whole.
    assert sent[-1] == {"role": "user", "content": message}
    users = [m["content"] for m in sent[:-1] if m["role"] == "user"]
    assert users == [f"{n} {chunk}" for n in range(10)]
    assert sum(len(m["content"]) for m in sent[:-1]) >= 300_000  # a 100k-token context (chars/3)

    # The ledger: every stored payload under the limit; what did not fit is behind pointers.
    sizes = [len(canonical_bytes(e["payload"])) for e in snapshot["events"]]
    assert len(sizes) == 33 and max(sizes) <= LIMIT
    intent = events_of(snapshot, "c-big")[0]["payload"]
    store = open_artifact_store(settings.effective_artifacts)
    field = intent["offloaded"]["payload.payload.attachment"]
    assert "attachment" not in intent["payload"]
    assert store.get(field["artifact_id"]) == canonical_bytes(attachment)
    assert store.get(intent["payload"]["message_artifact"]["artifact_id"]).decode() == message

    # The Temporal history: no event and no payload over 64 KiB; the large ones are pointers.
    client = await connect(settings)
    events = await history_of(client, result["workflow_id"])
    assert max(event.ByteSize() for event in events) <= LIMIT
    payloads = [p for event in events for p in history_payloads(event)]
    assert max(p.ByteSize() for p in payloads) <= LIMIT
    assert any(offloaded(p) for p in payloads)  # the turn's ledger reads carry 20 earlier events
    # An allowed turn's provider step is call_and_record (docs/WORKFLOW.md): its input holds the call.
    scheduled = next(
        e.activity_task_scheduled_event_attributes
        for e in events
        if e.activity_task_scheduled_event_attributes.activity_type.name == "turngate.call_and_record"
    )
    [step] = await client.data_converter.decode(scheduled.input.payloads, [CallAndRecordInput])
    call = step.call
    assert len(call.message_artifacts) == 10  # the earlier messages travel as previews + pointers
    assert all(len(call.messages[i].content) == 4096 for i in call.message_artifacts)

    code, report = run_verify(settings)
    assert code == 0 and report["ok"] is True, report["failures"]
    assert report["checked_artifacts"] >= 12


async def test_intent_payload_limit_at_and_over_64_kib_in_bytes(tmp_path, temporal_server) -> None:
    def with_inputs(pad: str) -> dict[str, Any]:
        return envelope("hi", correlation_id="c-in", inputs={"pad": pad})

    settings = make_settings(tmp_path, temporal_server.address)
    async with running_stack(settings) as stack:
        at = padded(with_inputs, LIMIT)
        assert (await stack.http.post("/ingress/intent", json=at)).status_code == 202
        # Multibyte: fewer characters than bytes; one byte over is refused, whatever the count.
        over = padded(lambda pad: with_inputs(pad) | {"correlation_id": "c-over"}, LIMIT + 1, unit="ž")
        assert len(json.dumps(over, ensure_ascii=False)) < LIMIT + 200
        refused = await stack.http.post("/ingress/intent", content=json.dumps(over, ensure_ascii=False))
        under = padded(lambda pad: with_inputs(pad) | {"correlation_id": "c-under"}, LIMIT - 1, unit="ž")
        assert (await stack.http.post("/ingress/intent", json=under)).status_code == 202
        snapshot = (await stack.http.get("/snapshot")).json()
    assert refused.status_code == 413
    assert refused.json()["reason_code"] == "admission.intent_too_large"
    assert refused.json()["field"] == "payload.inputs"
    assert events_of(snapshot, "c-over") == []  # nothing recorded
    stored = {e["correlation_id"]: e["payload"] for e in snapshot["events"] if e["kind"] == "INTENT"}
    assert len(canonical_bytes(stored["c-in"])) == LIMIT and "offloaded" not in stored["c-in"]
    assert len(canonical_bytes(stored["c-under"])) == LIMIT - 1


@pytest.mark.parametrize("unit", ["a", "ž", "😀"])
async def test_an_opaque_body_field_is_offloaded_just_over_the_limit(tmp_path, temporal_server, unit) -> None:
    def with_field(cid: str) -> Any:
        def build(pad: str) -> dict[str, Any]:
            body = envelope("hi", correlation_id=cid)
            body["payload"]["payload"]["blob"] = pad
            return body

        return build

    settings = make_settings(tmp_path, temporal_server.address)
    async with running_stack(settings) as stack:
        at = padded(with_field("c-at"), LIMIT, unit=unit)
        over = padded(with_field("c-over"), LIMIT + 1, unit=unit)
        for body in (at, over):
            sent = await stack.http.post("/ingress/intent", content=json.dumps(body, ensure_ascii=False))
            assert sent.status_code == 202, sent.text
        snapshot = (await stack.http.get("/snapshot")).json()
    stored = {e["correlation_id"]: e["payload"] for e in snapshot["events"] if e["kind"] == "INTENT"}
    assert "offloaded" not in stored["c-at"] and len(canonical_bytes(stored["c-at"])) == LIMIT
    pointer = stored["c-over"]["offloaded"]["payload.payload.blob"]
    assert "blob" not in stored["c-over"]["payload"] and stored["c-over"]["payload"]["message"] == "hi"
    assert len(canonical_bytes(stored["c-over"])) < 2048
    blob = over["payload"]["payload"]["blob"]
    store = open_artifact_store(settings.effective_artifacts)
    assert store.get(pointer["artifact_id"]) == canonical_bytes(blob)
    assert pointer["size_bytes"] == len(canonical_bytes(blob)) and "created_at" not in pointer


async def test_message_inline_limit_counts_utf8_bytes(tmp_path, temporal_server) -> None:
    inline = "ž" * (TEXT_INLINE_LIMIT_BYTES // 2)  # 16 KiB in half as many characters
    over = inline + "a"
    settings = make_settings(tmp_path, temporal_server.address)
    async with running_stack(settings) as stack:
        kept = (await stack.chat(inline, correlation_id="c-16k", wait=None)).json()
        moved = (await stack.chat(over, correlation_id="c-16k1", wait=None)).json()
        assert kept["accepted"] and moved["accepted"]
        snapshot = (await stack.http.get("/snapshot")).json()
    stored = {
        e["correlation_id"]: e["payload"]["payload"] for e in snapshot["events"] if e["kind"] == "INTENT"
    }
    assert stored["c-16k"] == {"message": inline}
    assert stored["c-16k1"]["message_truncated"] is True
    assert stored["c-16k1"]["message_artifact"]["size_bytes"] == TEXT_INLINE_LIMIT_BYTES + 1
    assert len(stored["c-16k1"]["message"]) == 4096


def test_verify_reports_a_stored_payload_over_64_kib(tmp_path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address)
    settings.data_dir.mkdir(parents=True, exist_ok=True)

    def draft(cid: str, size: int) -> EventDraft:
        base = payload_size({"blob": ""})
        return EventDraft(
            kind=EventKind.INTENT,
            thread_id=cid,
            turn_id=cid,
            correlation_id=cid,
            payload={"blob": "ž" * ((size - base) // 2) + "a" * ((size - base) % 2)},
        )

    with LedgerStore(settings.effective_ledger_url) as store:
        for cid, size in (("c-under", LIMIT - 1), ("c-at", LIMIT), ("c-over", LIMIT + 1)):
            recorded = store.append(draft(cid, size))
            assert payload_size(recorded.payload) == size
    code, report = run_verify(settings)
    assert code != 0 and report["ok"] is False
    assert [(f["kind"], f["correlation_id"]) for f in report["failures"]] == [("payload_too_large", "c-over")]
    assert f"{LIMIT + 1} bytes" in report["failures"][0]["detail"]
