"""`turngate verify` as a real process after the worker's config changed (config drift).

Turns are decided by a real worker on a real Temporal dev server; then the context config is
changed (a TURNGATE_CONTEXT_* override) and `turngate verify` runs as its own process. The worker
stored the config it decided with under its digest, so verify recomputes every DECISION with it.
When that stored config is missing or altered, verify does not say OK: it exits non-zero and
names the cause and the flag; with `--allow-unchecked` it exits 0 and still reports the count.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.processes import process_env
from tests.stack import running_stack
from turngate.artifacts.configs import context_config_path
from turngate.audit.report import EXIT_FAILED, EXIT_OK, EXIT_UNCHECKED
from turngate.core.context import context_config_digest
from turngate.core.policy import load_policy
from turngate.settings import Settings

DRIFT = {"TURNGATE_CONTEXT_MAX_REFS": "7"}  # another effective context config, another digest


def turngate(settings: Settings, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turngate", *args],
        env=process_env(settings, **env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def drifted(settings: Settings) -> Settings:
    return settings.model_copy(update={"context_max_refs": DRIFT["TURNGATE_CONTEXT_MAX_REFS"]})


def _current_digest(settings: Settings) -> str:
    return context_config_digest(settings.context_config())


async def decide_three_turns(settings: Settings) -> str:
    """Three turns of one thread (one with a ref, one REF_NOT_FOUND DENY); the policy's config digest."""
    thread = f"drift-{settings.workflow_id_prefix}"
    async with running_stack(settings) as stack:
        await stack.chat("What is 2+2?", correlation_id="c-1", thread_id=thread)
        second = await stack.chat(
            "Explain more", correlation_id="c-2", thread_id=thread, declared_refs=[{"ref_id": "c-1"}]
        )
        denied = await stack.chat(
            "hm", correlation_id="c-3", thread_id=thread, declared_refs=[{"ref_id": "no"}]
        )
        assert second.json()["decision"]["payload"]["decision"] == "ALLOW"
        assert denied.json()["decision"]["payload"]["reason_codes"] == ["REF_NOT_FOUND"]
    return second.json()["decision"]["payload"]["policy"]["config_digest"]


async def test_verify_under_config_drift_recomputes_with_the_stored_config(settings: Settings) -> None:
    policy_config = await decide_three_turns(settings)
    digest = _current_digest(settings)
    stored = Path(settings.effective_artifacts) / context_config_path(digest)
    assert stored.is_file(), "the worker stores the context config it decides with"
    # ... and its policy's config, under the config_digest its DECISIONs record.
    hex_digest = policy_config.removeprefix("sha256:")
    policy_file = Path(settings.effective_artifacts) / "standard/policy_config" / hex_digest[:2] / hex_digest
    assert json.loads(policy_file.read_bytes()) == load_policy(settings.policy_module).policy.config()

    # Unchanged config: nothing to look up.
    same = turngate(settings, "verify")
    assert same.returncode == EXIT_OK, same.stdout + same.stderr
    assert same.stdout.startswith("verify OK: 8 events, 3 decisions")

    # Drift: the DECISIONs are recomputed with the stored config, and that is said.
    drift = turngate(settings, "verify", **DRIFT)
    assert drift.returncode == EXIT_OK, drift.stdout + drift.stderr
    first = drift.stdout.splitlines()[0]
    assert first.startswith("verify OK: 8 events, 3 decisions"), drift.stdout
    assert "unchecked" not in first
    assert (
        f"INFO index 1 c-1: config_drift: 3 DECISION(s) (index 1..7) were made under context config {digest}"
        in (drift.stdout)
    )
    assert f"recomputed with the config stored at {context_config_path(digest)}" in drift.stdout

    # So does the API's GET /verify, under the changed config.
    async with running_stack(drifted(settings), worker=False) as stack:
        body = (await stack.http.get("/verify")).json()
    assert body["ok"] and (body["checked_decisions"], body["unchecked_decisions"]) == (3, 0)

    # `turngate replay turn` recomputes with it too.
    replay = turngate(settings, "replay", "turn", "c-2", **DRIFT)
    assert replay.returncode == EXIT_OK, replay.stdout + replay.stderr


async def test_verify_under_config_drift_without_the_stored_config(settings: Settings) -> None:
    await decide_three_turns(settings)
    digest = _current_digest(settings)
    stored = Path(settings.effective_artifacts) / context_config_path(digest)
    original = stored.read_bytes()

    # Altered: a failure (the bytes are not the config), and the DECISIONs are unchecked.
    stored.write_bytes(original.replace(b'"max_refs":50', b'"max_refs":51'))
    altered = turngate(settings, "verify", **DRIFT)
    assert altered.returncode == EXIT_FAILED, altered.stdout + altered.stderr
    assert altered.stdout.startswith("verify FAILED: 8 events, 0 decisions")
    assert "3 decision(s) unchecked" in altered.stdout.splitlines()[0]
    assert f"FAIL index 1 c-1: config_mismatch: {context_config_path(digest)}: the stored bytes hash to" in (
        altered.stdout
    )
    assert "UNCHECKED index 1 c-1: config_unavailable: " in altered.stdout
    assert "altered or corrupt" in altered.stdout
    assert altered.stdout.splitlines()[-1].endswith("--allow-unchecked accepts them: the failures still fail")
    with_flag = turngate(settings, "verify", "--allow-unchecked", **DRIFT)
    assert with_flag.returncode == EXIT_FAILED, "an altered stored config is a failure, allowed or not"

    # Missing (a ledger written before configs were stored): not OK, exit 3, cause and flag named.
    stored.unlink()
    missing = turngate(settings, "verify", **DRIFT)
    assert missing.returncode == EXIT_UNCHECKED, missing.stdout + missing.stderr
    lines = missing.stdout.splitlines()
    assert lines[0].startswith("verify INCOMPLETE: 8 events, 0 decisions")
    assert "0 failure(s)" in lines[0] and "3 decision(s) unchecked" in lines[0]
    assert lines[1].startswith(
        f"UNCHECKED index 1 c-1: config_unavailable: 3 DECISION(s) (index 1..7) were made under "
        f"context config {digest}"
    )
    assert "no config is stored under that digest" in lines[1]
    assert lines[-1].startswith("verify is not OK: 3 DECISION(s) could not be recomputed")
    assert "--allow-unchecked" in lines[-1]
    assert "verify OK" not in missing.stdout

    async with running_stack(drifted(settings), worker=False) as stack:
        body = (await stack.http.get("/verify")).json()
    assert body["ok"] is False and body["failures"] == [] and body["unchecked_decisions"] == 3

    as_json = turngate(settings, "verify", "--json", **DRIFT)
    assert as_json.returncode == EXIT_UNCHECKED
    body = json.loads(as_json.stdout)
    assert body["ok"] is False and body["failures"] == []
    assert (body["checked_decisions"], body["unchecked_decisions"]) == (0, 3)
    assert [f["kind"] for f in body["unchecked"]] == ["config_unavailable"]

    # Allowed: exit 0, and the count is still reported.
    allowed = turngate(settings, "verify", "--allow-unchecked", **DRIFT)
    assert allowed.returncode == EXIT_OK, allowed.stdout + allowed.stderr
    first = allowed.stdout.splitlines()[0]
    assert first.startswith("verify OK: 8 events, 0 decisions")
    assert "3 decision(s) unchecked (allowed by --allow-unchecked)" in first
    assert "UNCHECKED index 1 c-1: config_unavailable: " in allowed.stdout

    # The stored config back in place: everything is checked again.
    stored.write_bytes(original)
    again = turngate(settings, "verify", **DRIFT)
    assert again.returncode == EXIT_OK and again.stdout.startswith("verify OK: 8 events, 3 decisions")
