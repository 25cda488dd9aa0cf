"""Workbench handles in a real turn: fetched content reaches the model as execution-only context,
is stored as an artifact named by its digest, and every refusal is recorded in the DECISION and
the manifest (never dropped); off by default."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from tests.security.fake_resolver import LOOPBACK_ALLOWED_ENV, fake_resolver
from tests.stack import make_settings, running_stack
from turngate.artifacts import open_artifact_store


def load(settings, pointer: dict) -> dict:
    return json.loads(open_artifact_store(settings.effective_artifacts).get(pointer["artifact_id"]))


HANDLES = [
    {"ref_type": "artifact.handle", "ref_id": "ok", "kind": "note"},
    {"ref_type": "artifact.handle", "ref_id": "html", "kind": "note"},
    {"ref_type": "artifact.handle", "ref_id": "ok", "kind": "secret"},
]


async def test_handles_are_fetched_into_context_and_refusals_recorded(
    tmp_path, temporal_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fake_resolver() as resolver:
        monkeypatch.setenv("ALLOW_HANDLE_CONTENT_FETCH", "true")
        monkeypatch.setenv("WORKBENCH_RESOLVER_URL", resolver.base_url)
        monkeypatch.setenv("WORKBENCH_ADMIT_KINDS", "note")
        monkeypatch.setenv("WORKBENCH_DENY_NETWORKS", LOOPBACK_ALLOWED_ENV)
        monkeypatch.setenv("WORKBENCH_AUTH_BEARER_TOKEN", "wb-token-never-recorded")
        settings = make_settings(tmp_path, temporal_server.address)
        async with running_stack(settings) as stack:
            resp = await stack.chat(
                "summarise the note",
                correlation_id="c-h",
                declared_refs=HANDLES,
                inputs={"debug_snapshot": True},
            )
        assert resp.status_code == 202, resp.text
        assert resolver.seen_auth and resolver.seen_auth[0] == "Bearer wb-token-never-recorded"
    body = resp.json()
    decision = body["decision"]["payload"]
    assert decision["decision"] == "ALLOW"
    records = decision["external_context"]
    assert [r["reason_code"] for r in records] == [
        "workbench.fetched",
        "workbench.content_type",
        "workbench.kind_not_admitted",
    ]
    fetched = records[0]
    assert fetched["content_sha256"].startswith("sha256:") and fetched["artifact"]["sha256"]
    store = open_artifact_store(settings.effective_artifacts)
    assert store.get(fetched["artifact"]["artifact_id"]) == b"hello from the workbench"

    manifest = load(settings, decision["manifest"])
    included = [e for e in manifest["inclusion_log"] if e["included_reason"] == "declared_handle"]
    assert [e["item_id"] for e in included] == [fetched["content_sha256"]]
    refused = [e for e in manifest["exclusion_log"] if e["excluded_reason"] == "fetch_refused"]
    assert [e["source_ref"] for e in refused] == ["artifact.handle[1]:html", "artifact.handle[2]:ok"]
    assert len(manifest["external_refs"]) == 3

    execution = body["execution"]["payload"]
    prompt = load(settings, execution["fault_snapshots"]["prompt_snapshot"])  # the debug snapshot
    context = prompt["messages"][-2]
    assert context["role"] == "user" and "hello from the workbench" in context["content"]
    assert prompt["messages"][-1] == {"role": "user", "content": "summarise the note"}

    everything = json.dumps(body) + json.dumps(manifest) + json.dumps(prompt)
    assert "wb-token-never-recorded" not in everything


async def test_handle_fetch_is_off_by_default(
    tmp_path, temporal_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ALLOW_HANDLE_CONTENT_FETCH", raising=False)
    settings = make_settings(tmp_path, temporal_server.address)
    async with running_stack(settings) as stack:
        resp = await stack.chat("hi", correlation_id="c-off", declared_refs=HANDLES[:1])
    decision = resp.json()["decision"]["payload"]
    assert decision["decision"] == "ALLOW"
    assert [r["reason_code"] for r in decision["external_context"]] == ["workbench.disabled"]


async def _handle_turn(tmp_path, temporal_server, handle: str, correlation_id: str) -> dict:
    settings = make_settings(tmp_path / correlation_id, temporal_server.address)
    async with running_stack(settings) as stack:
        resp = await stack.chat(
            "summarise the note",
            correlation_id=correlation_id,
            declared_refs=[{"ref_type": "artifact.handle", "ref_id": handle, "kind": "note"}],
        )
    assert resp.status_code == 202, resp.text
    assert "decision" in resp.json(), resp.text
    return resp.json()["decision"]["payload"]


async def test_an_unusable_port_is_refused_and_recorded(
    tmp_path, temporal_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A port outside 0-65535 in the resolver URL or in a redirect is a recorded refusal, not an
    # exception inside the fetch (which no turn could record).
    monkeypatch.setenv("ALLOW_HANDLE_CONTENT_FETCH", "true")
    monkeypatch.setenv("WORKBENCH_ADMIT_KINDS", "note")
    monkeypatch.setenv("WORKBENCH_DENY_NETWORKS", LOOPBACK_ALLOWED_ENV)
    monkeypatch.setenv("WORKBENCH_RESOLVER_URL", "http://127.0.0.1:99999/h")
    decision = await _handle_turn(tmp_path, temporal_server, "ok", "c-port")
    assert decision["decision"] == "ALLOW"
    assert [r["reason_code"] for r in decision["external_context"]] == ["workbench.bad_url"]
    with fake_resolver() as resolver:
        monkeypatch.setenv("WORKBENCH_RESOLVER_URL", resolver.base_url)
        decision = await _handle_turn(tmp_path, temporal_server, "redirect-bad-port", "c-redirect-port")
    assert [r["reason_code"] for r in decision["external_context"]] == ["workbench.redirect_refused"]


async def test_the_default_deny_list_refuses_a_resolver_on_loopback(
    tmp_path, temporal_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # WORKBENCH_DENY_NETWORKS unset: loopback and private ranges are denied (docs/CONFIGURATION.md).
    monkeypatch.setenv("ALLOW_HANDLE_CONTENT_FETCH", "true")
    monkeypatch.setenv("WORKBENCH_ADMIT_KINDS", "note")
    monkeypatch.delenv("WORKBENCH_DENY_NETWORKS", raising=False)
    with fake_resolver() as resolver:
        monkeypatch.setenv("WORKBENCH_RESOLVER_URL", resolver.base_url)
        decision = await _handle_turn(tmp_path, temporal_server, "ok", "c-default-deny")
        assert resolver.seen_auth == []  # never contacted
    assert [r["reason_code"] for r in decision["external_context"]] == ["workbench.denied_address"]


async def test_a_resolver_that_never_answers_is_recorded_within_the_activity_bounds(
    tmp_path, temporal_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn schedules the fetch with a schedule-to-close bound, a heartbeat timeout and an
    attempt timeout; a resolver that accepts and never answers is tried three times and then
    recorded as `workbench.timeout`, and the turn goes on."""
    from temporalio.client import Client

    from turngate.workflows import external_refs_options as options

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    monkeypatch.setenv("ALLOW_HANDLE_CONTENT_FETCH", "true")
    monkeypatch.setenv("WORKBENCH_ADMIT_KINDS", "note")
    monkeypatch.setenv("WORKBENCH_DENY_NETWORKS", LOOPBACK_ALLOWED_ENV)
    monkeypatch.setenv("WORKBENCH_FETCH_TIMEOUT_MS", "300")
    monkeypatch.setenv("WORKBENCH_RESOLVER_URL", f"http://127.0.0.1:{silent.getsockname()[1]}/h")
    settings = make_settings(tmp_path, temporal_server.address)
    try:
        async with running_stack(settings) as stack:
            # the timeout only rules out a hang: how soon it ends is bench/external_refs_bounds.py's
            chat = stack.chat("summarise", correlation_id="c-silent", declared_refs=[HANDLES[0]])
            resp = await asyncio.wait_for(chat, 60)
    finally:
        silent.close()
    body = resp.json()
    decision = body["decision"]["payload"]
    assert decision["decision"] == "ALLOW" and body["execution"]
    assert [r["reason_code"] for r in decision["external_context"]] == ["workbench.timeout"]

    client = await Client.connect(temporal_server.address)
    history = await client.get_workflow_handle(body["workflow_id"]).fetch_history()
    [scheduled_event] = [
        e
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "turngate.resolve_external_refs"
    ]
    scheduled = scheduled_event.activity_task_scheduled_event_attributes
    assert scheduled.start_to_close_timeout.ToTimedelta() == options.ATTEMPT_TIMEOUT
    assert scheduled.schedule_to_close_timeout.ToTimedelta() == options.SCHEDULE_TO_CLOSE_TIMEOUT
    assert scheduled.heartbeat_timeout.ToTimedelta() == options.HEARTBEAT_TIMEOUT
    assert scheduled.retry_policy.maximum_attempts == options.MAX_ATTEMPTS
    [started_event] = [
        e.activity_task_started_event_attributes
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
        and e.activity_task_started_event_attributes.scheduled_event_id == scheduled_event.event_id
    ]
    assert started_event.attempt == options.MAX_ATTEMPTS  # the last attempt recorded the refusal
    # The configured 0.3 s applied (not the default 3 s, nor the cut to the 15 s attempt): the
    # attempt before failed with the fetch's own timeout, which its failure names.
    failed_before = started_event.last_failure
    assert failed_before.message == "workbench.timeout: no complete answer within 300 ms", failed_before
