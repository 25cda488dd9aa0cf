"""Failures in workflow code end as recorded DENYs, never as a workflow task retried forever:
a prompt builder that raises (``prompt.builder_error``) and a pinned prompt snapshot that no
longer fits profiles.json after it was edited and the worker restarted
(``prompt.snapshot_incompatible``). Worker and API are real child processes; the worker is
killed and started again on the edited pack."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.faults.processes import child_stack, intents_without_decision
from tests.processes import process_env, spawn, wait_http
from tests.stack import envelope, make_settings
from turngate.ledger import LedgerStore, verify_ledger
from turngate.settings import Settings

POLICY = "tests.faults.fragile_builder"


def _verify_replaying_policy(settings: Settings, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turngate", "verify", "--replay-policy", "--json"],
        env=process_env(settings, **env),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _profiles(file_layers: list[str]) -> dict[str, Any]:
    layers: list[dict[str, Any]] = [{"file": name} for name in file_layers]
    return {
        "schema_version": "turngate.prompts.1",
        "default_profile": "chat",
        "builders": {"fragile": "tests.faults.fragile_builder:fragile"},
        "profiles": {"chat": {"layers": [*layers, {"builder": "fragile"}], "tools": []}},
    }


def _write_pack(root: Path, file_layers: list[str]) -> None:
    for name in file_layers:
        path = root / "default" / f"{name}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{name.upper()} LAYER\n", encoding="utf-8")
    (root / "profiles.json").write_text(json.dumps(_profiles(file_layers)), encoding="utf-8")


def _turn(base: str, correlation_id: str, thread: str, parent: str | None = None, **inputs: Any) -> dict:
    body = envelope("hello", correlation_id=correlation_id, thread_id=thread, turn_id=correlation_id)
    if parent:
        body["payload"]["parent_turn_id"] = parent
        body["payload"]["declared_refs"] = [{"ref_type": "event", "ref_id": parent}]
    if inputs:
        body["payload"]["inputs"] = inputs
    resp = httpx.post(f"{base}/ingress/intent", params={"wait": "execution"}, json=body, timeout=120)
    assert resp.status_code == 202, resp.text
    return resp.json()


def _decision_seen_everywhere(base: str, correlation_id: str, code: str) -> dict:
    """The DENY as /snapshot serves it and as the web UI's turn view summarises it."""
    page = httpx.get(f"{base}/snapshot", params={"limit": 2000}, timeout=30).json()
    decisions = [
        e for e in page["events"] if e["correlation_id"] == correlation_id and e["kind"] == "DECISION"
    ]
    assert len(decisions) == 1
    payload = decisions[0]["payload"]
    assert payload["decision"] == "DENY" and payload["reason_codes"] == [code]
    assert payload["error"]["code"] == code
    ui = httpx.get(f"{base}/ui/api/turn", params={"correlation_id": correlation_id}, timeout=30).json()
    assert ui["summary"]["decision"]["decision"] == "DENY"
    assert ui["summary"]["decision"]["reason_codes"] == [code]
    assert ui["summary"]["decision"]["error_code"] == code
    return payload


async def test_prompt_failures_are_recorded_denies_across_a_worker_restart(
    tmp_path: Path, temporal_server
) -> None:
    pack = tmp_path / "pack"
    _write_pack(pack, ["persona"])
    settings = make_settings(tmp_path, temporal_server.address, policy_module=POLICY)
    env = {"TURNGATE_PROMPTS_DIR": str(pack)}
    base = f"http://127.0.0.1:{settings.port}"
    store = LedgerStore(settings.effective_ledger_url)
    api = spawn(["serve", "--port", str(settings.port)], settings, tmp_path / "api.log", **env)
    worker = spawn(["worker"], settings, tmp_path / "worker-1.log", **env)
    try:
        wait_http(f"{base}/healthz", 60)
        # A thread pins its prompt snapshot on its first turn.
        first = _turn(base, "c-first", "t-pinned")
        assert first["decision"]["payload"]["decision"] == "ALLOW"
        assert first["execution"]["payload"]["output_text"] == "echo: hello"

        # A builder that raises: a DENY, at once, not a workflow task retried forever.
        broken = _turn(base, "c-builder", "t-builder", explode=True)
        assert broken["decision"]["payload"]["reason_codes"] == ["prompt.builder_error"]
        assert "execution" not in broken
        payload = _decision_seen_everywhere(base, "c-builder", "prompt.builder_error")
        assert payload["error"]["cause"] == "prompts.builder_failed"
        assert "broke on purpose" in payload["error"]["detail"]

        # profiles.json is edited (a new file layer) and the worker restarted (killed).
        worker.send_signal(signal.SIGKILL)
        worker.wait(15)
        _write_pack(pack, ["persona", "tone"])
        worker = spawn(["worker"], settings, tmp_path / "worker-2.log", **env)

        # The thread's pinned snapshot lacks the new layer: a DENY that says so.
        later = _turn(base, "c-later", "t-pinned", parent="c-first")
        assert later["decision"]["payload"]["reason_codes"] == ["prompt.snapshot_incompatible"]
        payload = _decision_seen_everywhere(base, "c-later", "prompt.snapshot_incompatible")
        assert payload["error"]["cause"] == "prompts.layer_not_in_snapshot"
        assert "tone" in payload["error"]["detail"]

        # The restarted worker denies a raising builder the same way.
        again = _turn(base, "c-builder-2", "t-builder-2", explode=True)
        assert again["decision"]["payload"]["reason_codes"] == ["prompt.builder_error"]
        _decision_seen_everywhere(base, "c-builder-2", "prompt.builder_error")

        # A new thread snapshots the edited pack and runs; the builder works when not asked to fail.
        fresh = _turn(base, "c-fresh", "t-fresh")
        assert fresh["decision"]["payload"]["decision"] == "ALLOW"
        layers = [layer["name"] for layer in fresh["decision"]["payload"]["prompt"]["layers"]]
        assert layers == ["persona", "tone", "fragile"]
        assert intents_without_decision(store) == []
        assert verify_ledger(store).ok
        # The policy is deterministic: deciding again agrees (the prompt DENYs came after it).
        verified = _verify_replaying_policy(settings, env)
        assert verified.returncode == 0, verified.stdout + verified.stderr
    finally:
        for proc in (api, worker):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(20)
        store.close()


async def test_a_policy_that_reads_randomness_or_the_clock_is_caught_by_verify(
    tmp_path: Path, temporal_server
) -> None:
    settings = make_settings(tmp_path, temporal_server.address, policy_module="tests.faults.coin_policy")
    with child_stack(settings, tmp_path) as base:
        for i in range(16):
            resp = httpx.post(
                f"{base}/ingress/intent",
                params={"wait": "decision"},
                json=envelope("toss", correlation_id=f"c-coin-{i}"),
                timeout=120,
            )
            assert resp.status_code == 202, resp.text
    # Every DECISION is well formed and verifies; only deciding again tells the policy apart.
    plain = subprocess.run(
        [sys.executable, "-m", "turngate", "verify", "--json"],
        env=process_env(settings),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plain.returncode == 0, plain.stdout + plain.stderr
    replayed = _verify_replaying_policy(settings, {})
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    report = json.loads(replayed.stdout)
    kinds = {finding["kind"] for finding in report["failures"]}
    assert kinds == {"policy_replay_mismatch"}
    assert all("decides differently on replay" in f["detail"] for f in report["failures"])
