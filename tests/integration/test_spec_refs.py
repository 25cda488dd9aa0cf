"""The context system's chat-history example, written as a client that knows only the
specification would write it (refs by correlation or turn id, ``ref_type: event``), and the
empty-refs policy's first-turn option, on a real stack (API, Temporal, worker)."""

from __future__ import annotations

import json

from tests.stack import make_settings, running_stack
from turngate.artifacts import open_artifact_store


def _stored(settings, pointer: dict) -> dict:
    return json.loads(open_artifact_store(settings.effective_artifacts).get(pointer["artifact_id"]))


async def test_example_1_as_written_puts_the_earlier_answer_into_the_prompt(settings) -> None:
    async with running_stack(settings) as stack:
        first = (await stack.chat("What is 2+2?", correlation_id="c-1", thread_id="t")).json()
        answer = first["execution"]["payload"]["output_text"]
        turn_1 = (await stack.http.get("/snapshot", params={"thread_id": "t"})).json()["events"]
        resp = await stack.chat(
            "Explain more",
            correlation_id="c-2",
            thread_id="t",
            parent_turn_id="c-1",
            # INTENT-1 and EXECUTION-1, by the ids the client has: the turn's correlation id
            # and its turn id (turn_id defaults to the correlation id).
            declared_refs=[{"ref_type": "event", "ref_id": "c-1"}, {"ref_type": "event", "ref_id": "c-1"}],
            inputs={"debug_snapshot": True},
        )
        body = resp.json()
        verified = (await stack.http.get("/verify", params={"thread_id": "t"})).json()
    decision = body["decision"]["payload"]
    assert decision["decision"] == "ALLOW"
    assert [(r["ref_id"], r["event_kind"], r["admitted_for"]) for r in decision["resolved_refs"]] == [
        ("c-1", "INTENT", "governance"),
        ("c-1", "EXECUTION", "execution_only"),
    ]
    intent_1, execution_1 = turn_1[0], turn_1[2]
    assert [r["event_digest"] for r in decision["resolved_refs"]] == [
        intent_1["digest"],
        execution_1["digest"],
    ]
    assert decision["normative_input_digests"] == [intent_1["digest"]]  # the policy sees INTENT-1
    spec = decision["context_spec"]
    assert spec["assembly_rules"]["schema_version"] == "turngate.ctxspec.3"
    assert "EXPAND_TURN_REFS" in spec["retrieval"]["normalization"]["applied_rules"]
    # Prompt gets [INTENT-1, EXECUTION-1, INTENT-2].
    prompt = _stored(settings, body["execution"]["payload"]["fault_snapshots"]["prompt_snapshot"])
    messages = [(m["role"], m["content"]) for m in prompt["messages"]]
    assert messages == [("user", "What is 2+2?"), ("assistant", answer), ("user", "Explain more")]
    assert "prompt_shape" not in spec["assembly_rules"]  # the default shape: chat_history
    assert verified["ok"] is True, verified


async def test_example_1_in_the_system_context_shape(tmp_path, temporal_server) -> None:
    """`prompt_shape: system_context`: the provider gets `[system_context, user_message]`, the
    DECISION's context spec says so, and verify recomputes it."""
    from turngate.core.system_context import CONTEXT_HEADER

    settings = make_settings(tmp_path, temporal_server.address, context_prompt_shape="system_context")
    async with running_stack(settings) as stack:
        first = (await stack.chat("What is 2+2?", correlation_id="c-1", thread_id="t")).json()
        answer = first["execution"]["payload"]["output_text"]
        body = (
            await stack.chat(
                "Explain more",
                correlation_id="c-2",
                thread_id="t",
                parent_turn_id="c-1",
                declared_refs=[
                    {"ref_type": "event", "ref_id": "c-1"},
                    {"ref_type": "event", "ref_id": "c-1"},
                ],
                inputs={"debug_snapshot": True},
            )
        ).json()
        verified = (await stack.http.get("/verify", params={"thread_id": "t"})).json()
    decision = body["decision"]["payload"]
    assert decision["decision"] == "ALLOW"
    assert decision["context_spec"]["assembly_rules"]["prompt_shape"] == "system_context"
    prompt = _stored(settings, body["execution"]["payload"]["fault_snapshots"]["prompt_snapshot"])
    assert [(m["role"], m["content"]) for m in prompt["messages"]] == [
        ("system", f"{CONTEXT_HEADER}\n[user] What is 2+2?\n[assistant] {answer}"),
        ("user", "Explain more"),
    ]
    assert verified["ok"] is True, verified


async def test_empty_refs_first_turn_deny_is_an_explicit_option(tmp_path, temporal_server) -> None:
    strict = make_settings(tmp_path, temporal_server.address, context_empty_refs_first_turn="DENY")
    async with running_stack(strict) as stack:
        body = (await stack.chat("hello", correlation_id="c-first", thread_id="t")).json()
        snap = (await stack.http.get("/snapshot", params={"thread_id": "t"})).json()
    decision = body["decision"]["payload"]
    assert (decision["decision"], decision["reason_codes"]) == ("DENY", ["EMPTY_REFS_DENIED"])
    assert "empty_refs_first_turn" in decision["error"]["detail"]
    assert [e["kind"] for e in snap["events"]] == ["INTENT", "DECISION"]


async def test_first_turn_without_refs_is_exempt_by_default(settings) -> None:
    """What the published DBL gateway does with its shipped config (empty_refs_policy DENY): a
    first chat.message without refs runs."""
    assert settings.context_config().context.empty_refs_policy == "DENY"
    async with running_stack(settings) as stack:
        body = (await stack.chat("hello", correlation_id="c-first", thread_id="t")).json()
    assert body["decision"]["payload"]["decision"] == "ALLOW"
    assert "execution" in body
