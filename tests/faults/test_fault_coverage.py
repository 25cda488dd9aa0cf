"""Fault snapshots where the observability spec asks for them, against real misbehaving servers
and real child processes: a provider that refuses (the snapshot is the exact request it got,
tools and the full offloaded message included), a Workbench resolver that errors and times out,
and a pinned prompt snapshot whose artifact is gone. Manifests name their snapshot
(``snapshot_id``) and log the system prompt's layers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from tests.fakes import fake_openai
from tests.faults.processes import child_stack, intents_without_decision
from tests.prompts.helpers import profiles_config
from tests.security.fake_resolver import LOOPBACK_ALLOWED_ENV, fake_resolver
from tests.stack import envelope, make_settings
from turngate.artifacts import open_artifact_store
from turngate.ledger import LedgerStore

#: Over the 64 KiB inline limit in bytes (two bytes per character), under it in characters.
LARGE_MESSAGE = "ü" * 40_000


def _pack(root: Path) -> Path:
    tool = profiles_config()["tools"][0] | {"min_exchanges": 0}
    config = {
        "schema_version": "turngate.prompts.1",
        "default_profile": "chat",
        "profiles": {
            "chat": {
                "layers": [
                    {"file": "persona"},
                    {"file": "empty"},
                    {"builder": "language", "params": {"instruction": "Answer in Lithuanian."}},
                ],
                "tools": [tool["name"]],
            }
        },
        "tools": [tool],
    }
    (root / "default").mkdir(parents=True)
    (root / "default" / "persona.md").write_text("You are a careful tutor.\n", encoding="utf-8")
    (root / "default" / "empty.md").write_text("\n", encoding="utf-8")
    (root / "profiles.json").write_text(json.dumps(config), encoding="utf-8")
    return root


def _post(base: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = httpx.post(f"{base}/ingress/intent", params={"wait": "execution"}, json=body, timeout=120)
    assert resp.status_code == 202, resp.text
    return resp.json()


def _load(store: Any, pointer: dict[str, Any]) -> dict[str, Any]:
    return json.loads(store.get(pointer["artifact_id"]))


async def test_a_provider_fault_snapshots_the_exact_request(tmp_path: Path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address)
    env = {
        "TURNGATE_PROMPTS_DIR": str(_pack(tmp_path / "pack")),
        "OPENAI_API_KEY": "sk-test-never-recorded",
        "TURNGATE_DEFAULT_PROVIDER": "openai",
    }
    store = open_artifact_store(settings.effective_artifacts)
    with (
        fake_openai("fine") as openai,
        child_stack(settings, tmp_path, OPENAI_BASE_URL=openai.base_url, **env) as base,
    ):
        openai.fail_next(400, message="this request is refused")
        body = _post(base, envelope(LARGE_MESSAGE, correlation_id="c-refused"))
        execution = body["execution"]["payload"]
        assert execution["error"]["code"] == "provider.bad_request"
        sent = openai.last_request.json  # what the provider received

        prompt = _load(store, execution["fault_snapshots"]["prompt_snapshot"])
        assert [(m["role"], m["content"]) for m in prompt["messages"]] == [
            (m["role"], m["content"]) for m in sent["messages"]
        ]
        assert prompt["messages"][-1]["content"] == LARGE_MESSAGE  # in full, not the preview
        assert [t["name"] for t in prompt["tools"]] == [t["function"]["name"] for t in sent["tools"]]
        assert prompt["tools"][0]["parameters"] == sent["tools"][0]["function"]["parameters"]
        assert (prompt["provider"], prompt["model"]) == ("openai", sent["model"])
        outcome = _load(store, execution["fault_snapshots"]["provider_output_snapshot"])
        assert outcome["fault_triggers"] == ["provider_error"]

        # The manifest names its snapshot and logs the system prompt's layers.
        manifest = _load(store, execution["manifest"])
        assert manifest["snapshot_id"] == execution["fault_snapshots"]["prompt_snapshot"]["artifact_id"]
        layers = [e for e in manifest["inclusion_log"] if e["included_reason"] == "system_prompt_layer"]
        recorded = body["decision"]["payload"]["prompt"]["layers"]
        assert [e["source_ref"] for e in layers] == [f"prompt_layer:{r['name']}" for r in recorded]
        assert [e["item_id"] for e in layers] == [r["sha256"] for r in recorded]
        assert [r["name"] for r in recorded] == ["persona", "language"]
        skipped = [e for e in manifest["exclusion_log"] if e["source_ref"] == "prompt_layer:empty"]
        assert [e["excluded_reason"] for e in skipped] == ["no_prompt_content"]
        # No snapshot, no snapshot_id (a clean DECISION step).
        assert _load(store, body["decision"]["payload"]["manifest"])["snapshot_id"] is None
        everything = json.dumps(body) + json.dumps(prompt) + json.dumps(manifest)
        assert "sk-test-never-recorded" not in everything

        # A pinned prompt snapshot whose artifact is gone: a missing pointer, so a fault.
        first = _post(base, envelope("hello", correlation_id="c-pin", thread_id="t-pin", turn_id="c-pin"))
        pinned = first["decision"]["payload"]["prompt"]["snapshot_artifact"]
        (Path(settings.effective_artifacts) / pinned["path"]).unlink()
        later = envelope("again", correlation_id="c-lost", thread_id="t-pin", turn_id="c-lost")
        later["payload"]["parent_turn_id"] = "c-pin"
        later["payload"]["declared_refs"] = [{"ref_type": "event", "ref_id": "c-pin"}]
        decision = _post(base, later)["decision"]["payload"]
        assert decision["reason_codes"] == ["SYSTEM_ERROR"]
        assert decision["error"]["missing_pointers"] == ["prompt_snapshot"]
        snapshot = _load(store, decision["fault_snapshots"]["prompt_snapshot"])
        assert snapshot["messages"] == [{"role": "user", "content": "again"}]
        manifest = _load(store, decision["manifest"])
        assert manifest["snapshot_id"] == decision["fault_snapshots"]["prompt_snapshot"]["artifact_id"]


async def test_a_failing_workbench_fetch_is_a_fault_with_snapshots(tmp_path: Path, temporal_server) -> None:
    settings = make_settings(tmp_path, temporal_server.address)
    ledger = LedgerStore(settings.effective_ledger_url)
    store = open_artifact_store(settings.effective_artifacts)
    handles = [
        {"ref_type": "artifact.handle", "ref_id": "missing", "kind": "note"},  # 404: http_error
        {"ref_type": "artifact.handle", "ref_id": "slow", "kind": "note"},  # over the timeout
        {"ref_type": "artifact.handle", "ref_id": "ok", "kind": "note"},
    ]
    try:
        with fake_resolver() as resolver:
            env = {
                "ALLOW_HANDLE_CONTENT_FETCH": "true",
                "WORKBENCH_RESOLVER_URL": resolver.base_url,
                "WORKBENCH_ADMIT_KINDS": "note",
                "WORKBENCH_FETCH_TIMEOUT_MS": "500",
                "WORKBENCH_DENY_NETWORKS": LOOPBACK_ALLOWED_ENV,
            }
            with child_stack(settings, tmp_path, **env) as base:
                body = _post(base, envelope("summarise", correlation_id="c-wb", declared_refs=handles))
                ok = _post(base, envelope("summarise", correlation_id="c-wb-ok", declared_refs=handles[2:]))
        decision = body["decision"]["payload"]
        assert decision["decision"] == "ALLOW"  # refused handles are left out, the turn runs
        assert [r["reason_code"] for r in decision["external_context"]] == [
            "workbench.http_error",
            "workbench.timeout",
            "workbench.fetched",
        ]
        execution = body["execution"]["payload"]
        snapshots = execution["fault_snapshots"]
        assert set(snapshots) == {"prompt_snapshot", "provider_output_snapshot", "tool_output_snapshot"}
        tools = _load(store, snapshots["tool_output_snapshot"])
        assert [r["reason_code"] for r in tools["external_refs"]] == [
            "workbench.http_error",
            "workbench.timeout",
            "workbench.fetched",
        ]
        assert "404" in tools["external_refs"][0]["detail"]
        assert _load(store, snapshots["provider_output_snapshot"])["fault_triggers"] == ["fetch_error"]
        prompt = _load(store, snapshots["prompt_snapshot"])
        assert any("hello from the workbench" in m["content"] for m in prompt["messages"])
        manifest = _load(store, execution["manifest"])
        assert manifest["snapshot_id"] == snapshots["prompt_snapshot"]["artifact_id"]
        # A fetch that worked is no fault: no snapshots.
        assert "fault_snapshots" not in ok["execution"]["payload"]
        assert intents_without_decision(ledger) == []
    finally:
        ledger.close()
