"""Context observability in a real turn: a manifest per step, fault snapshots, SYSTEM_ERROR stop semantics."""

from __future__ import annotations

import json
import os

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.stack import make_settings, running_stack
from turngate.artifacts import open_artifact_store
from turngate.devserver import free_port


def load(settings, pointer: dict) -> dict:
    store = open_artifact_store(settings.effective_artifacts)
    return json.loads(store.get(pointer["artifact_id"]))


async def test_allow_turn_has_manifests_with_inclusions_and_budget_exclusions(tmp_path, temporal_server):
    settings = make_settings(tmp_path, temporal_server.address, token_budget=20)
    async with running_stack(settings) as stack:
        await stack.chat("first question " * 5, correlation_id="c-1", thread_id="t")
        await stack.chat(
            "second question",
            correlation_id="c-2",
            thread_id="t",
            parent_turn_id="c-1",
            declared_refs=[{"ref_id": "c-1"}, {"ref_type": "execution", "ref_id": "c-1"}],
        )
        body = (
            await stack.chat(
                "third",
                correlation_id="c-3",
                thread_id="t",
                parent_turn_id="c-2",
                declared_refs=[
                    {"ref_id": "c-1"},
                    {"ref_type": "execution", "ref_id": "c-1"},
                    {"ref_id": "c-2"},
                    {"ref_type": "execution", "ref_id": "c-2"},
                ],
            )
        ).json()
    decision = body["decision"]["payload"]
    execution = body["execution"]["payload"]
    manifest = load(settings, decision["manifest"])
    assert manifest["step_id"] == "decision" and manifest["intent"]["decision"] == "ALLOW"
    assert manifest["token_budget"] == 20
    excluded = {e["excluded_reason"] for e in manifest["exclusion_log"]}
    assert excluded == {"budget_limit"}  # the oldest pair (turn c-1) did not fit
    included = [e["source_ref"] for e in manifest["inclusion_log"] if e["included_reason"] == "declared_ref"]
    assert included and min(included) > 2  # only turn c-2's events made it
    assert manifest["prefix_hash"].startswith("sha256:")
    assert load(settings, execution["manifest"])["step_id"] == "execution"
    assert "fault_snapshots" not in execution


async def test_denied_turn_has_a_manifest(tmp_path, temporal_server):
    settings = make_settings(tmp_path, temporal_server.address, policy_module="turngate.policies.deny_all")
    async with running_stack(settings) as stack:
        body = (await stack.chat("hi", correlation_id="c-1")).json()
    manifest = load(settings, body["decision"]["payload"]["manifest"])
    assert manifest["intent"]["decision"] == "DENY"
    assert manifest["inclusion_log"] == []


async def test_provider_fault_stores_prompt_and_output_snapshots(tmp_path, temporal_server):
    settings = make_settings(tmp_path, temporal_server.address, llm_wall_clock_s=1, echo_delay_ms=400)
    async with running_stack(settings) as stack:
        body = (await stack.chat("one two three four five six", correlation_id="c-slow")).json()
    execution = body["execution"]["payload"]
    assert execution["error"]["code"] == "llm.timeout"
    snapshots = execution["fault_snapshots"]
    prompt = load(settings, snapshots["prompt_snapshot"])
    assert prompt["messages"][-1] == {"role": "user", "content": "one two three four five six"}
    assert load(settings, snapshots["provider_output_snapshot"])["error"]["code"] == "llm.timeout"
    assert snapshots["prompt_snapshot"]["path"].startswith("snapshot/")
    manifest = load(settings, execution["manifest"])
    assert {a["artifact_id"] for a in manifest["artifacts"]} == {p["artifact_id"] for p in snapshots.values()}


async def test_debug_snapshot_request_keeps_the_prompt(settings):
    async with running_stack(settings) as stack:
        body = (await stack.chat("show me", correlation_id="c-dbg", inputs={"debug_snapshot": True})).json()
    assert "prompt_snapshot" in body["execution"]["payload"]["fault_snapshots"]


@pytest.fixture
def s3_server(monkeypatch):
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }.items():
        monkeypatch.setenv(name, value)
    boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).create_bucket(Bucket="turngate")
    yield server
    server.stop()


async def test_artifact_store_down_stops_the_turn_with_system_error(tmp_path, temporal_server, s3_server):
    # The turn gives up on the store at the artifact deadline: a short one, not the 15 s default.
    settings = make_settings(
        tmp_path, temporal_server.address, artifacts="s3://turngate/audit", artifact_deadline_s=3.0
    )
    async with running_stack(settings) as stack:
        ok = (await stack.chat("stored", correlation_id="c-ok")).json()
        assert ok["decision"]["payload"]["manifest"]["path"].startswith("standard/manifest/")
        s3_server._server.server_close()  # refuse connections from now on
        s3_server.stop()
        body = (await stack.chat("not stored", correlation_id="c-down")).json()
    decision = body["decision"]["payload"]
    assert decision["decision"] == "DENY" and decision["reason_codes"] == ["SYSTEM_ERROR"]
    assert decision["error"]["code"] == "SYSTEM_ERROR"
    assert decision["error"]["missing_pointers"] == ["manifest"]
    assert "manifest" not in decision and "execution" not in body


async def test_one_megabyte_message_never_enters_the_ledger_or_temporal(tmp_path, temporal_server):
    settings = make_settings(
        tmp_path, temporal_server.address, max_message_bytes=2_000_000, max_body_bytes=3_000_000
    )
    message = ("word " * 200_000).strip()  # 1 MB
    async with running_stack(settings) as stack:
        body = (await stack.chat(message, correlation_id="c-big")).json()
        snap = (await stack.http.get("/snapshot")).json()
    from turngate.core.canonical import canonical_bytes
    from turngate.temporal_client import connect

    assert all(len(canonical_bytes(e["payload"])) < 64 * 1024 for e in snap["events"])
    intent = snap["events"][0]["payload"]["payload"]
    assert intent["message_truncated"] is True and intent["message_artifact"]["size_bytes"] == len(message)
    store = open_artifact_store(settings.effective_artifacts)
    assert store.get(intent["message_artifact"]["artifact_id"]).decode() == message
    execution = body["execution"]["payload"]
    assert execution["output_truncated"] is True
    # The provider saw the whole message: echo's full answer is in the artifact.
    assert store.get(execution["output_artifact"]["artifact_id"]).decode() == "echo: " + message
    client = await connect(settings)
    history = await client.get_workflow_handle(body["workflow_id"]).fetch_history()
    assert max(event.ByteSize() for event in history.events) < 64 * 1024
