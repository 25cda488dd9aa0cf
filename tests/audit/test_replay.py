"""Ledger replay of one turn: recompute its DECISION from stored inputs and a loaded policy."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest

from tests.audit.helpers import Ledger, config, make_ledger
from turngate.artifacts.configs import store_context_config
from turngate.audit.replay import replay_histories, replay_turn
from turngate.audit.report import render_turn_replay_text, replay_turn_command
from turngate.core.context import load_context_config

ALLOW_ALL = "turngate.policies.allow_all"
WITH_REFS = "c-0000008"  # references c-0000002 (event + execution)
DENIED = "c-0000006"  # declared a ref that does not exist: REF_NOT_FOUND
LAST = "c-0000029"


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    built = make_ledger(tmp_path / "data", 30, threads=6, deny_every=7)
    yield built
    built.store.close()


def statuses(replay) -> dict[str, str]:
    return {check.name: check.status for check in replay.checks}


def test_a_turn_with_refs_replays(ledger: Ledger) -> None:
    replay = replay_turn(
        ledger.store,
        WITH_REFS,
        context_config=config(),
        policy_module=ALLOW_ALL,
        artifacts=ledger.artifacts(),
    )
    assert replay.ok, replay.checks
    assert set(statuses(replay).values()) == {"pass"}
    assert {"context_digest", "resolved_refs", "policy_identity", "decision", "artifacts"} <= set(
        statuses(replay)
    )
    assert replay.recorded["decision"] == replay.replayed["decision"] == "ALLOW"
    assert replay.recorded["policy"] == replay.replayed["policy"]
    assert replay.thread_id == "thread-00002" and replay.decision_index is not None


def test_a_ref_error_deny_replays(ledger: Ledger) -> None:
    replay = replay_turn(ledger.store, DENIED, context_config=config(), policy_module=ALLOW_ALL)
    assert replay.ok, replay.checks
    assert replay.recorded["reason_codes"] == replay.replayed["reason_codes"] == ["REF_NOT_FOUND"]
    assert "execution" not in statuses(replay)


def test_a_different_policy_is_detected(ledger: Ledger) -> None:
    replay = replay_turn(
        ledger.store, WITH_REFS, context_config=config(), policy_module="turngate.policies.deny_all"
    )
    assert not replay.ok
    found = statuses(replay)
    assert found["policy_identity"] == found["decision"] == found["reason_codes"] == "fail"
    assert found["context_digest"] == "pass"  # the inputs still recompute
    identity = next(c for c in replay.checks if c.name == "policy_identity")
    assert "turngate.allow_all" in identity.detail and "turngate.deny_all" in identity.detail
    assert replay.replayed["decision"] == "DENY"


def test_a_policy_that_cannot_be_loaded_fails_the_replay(ledger: Ledger) -> None:
    replay = replay_turn(ledger.store, WITH_REFS, context_config=config(), policy_module="no.such.module")
    assert not replay.ok and statuses(replay)["policy_loaded"] == "fail"


def test_a_forged_context_digest_fails_the_replay(ledger: Ledger) -> None:
    decision = ledger.row(LAST, "DECISION")
    forged = "sha256:" + hashlib.sha256(b"forged").hexdigest()
    ledger.edit_payload(decision["index"], lambda p: p.update(context_digest=forged), reseal=True)
    replay = replay_turn(ledger.store, LAST, context_config=config(), policy_module=ALLOW_ALL)
    found = statuses(replay)
    assert not replay.ok
    assert found["context_digest"] == found["execution"] == "fail"
    assert found["event_digests"] == found["resolved_refs"] == found["decision"] == "pass"


def test_config_drift_skips_the_context_checks(ledger: Ledger) -> None:
    other = load_context_config(None, {"TURNGATE_CONTEXT_MAX_REFS": "7"})
    replay = replay_turn(ledger.store, WITH_REFS, context_config=other, policy_module=ALLOW_ALL)
    found = statuses(replay)
    assert found["context_config"] == "fail" and found["context_digest"] == "skip"
    known = replay_turn(
        ledger.store, WITH_REFS, context_config=other, known_configs=[config()], policy_module=ALLOW_ALL
    )
    assert known.ok, known.checks


def test_config_drift_replays_with_the_stored_config(ledger: Ledger) -> None:
    store_context_config(ledger.artifacts(), config())
    other = load_context_config(None, {"TURNGATE_CONTEXT_MAX_REFS": "7"})
    replay = replay_turn(
        ledger.store, WITH_REFS, context_config=other, policy_module=ALLOW_ALL, artifacts=ledger.artifacts()
    )
    assert replay.ok, replay.checks
    found = statuses(replay)
    assert found["context_config"] == found["context_digest"] == found["decision"] == "pass"


def test_an_unknown_turn(ledger: Ledger) -> None:
    replay = replay_turn(ledger.store, "c-nope", context_config=config(), policy_module=ALLOW_ALL)
    assert not replay.ok and statuses(replay) == {"turn_recorded": "fail"}
    assert "c-nope" in render_turn_replay_text(replay)


def test_replay_turn_command(ledger: Ledger) -> None:
    out, err = io.StringIO(), io.StringIO()
    settings = ledger.settings(policy_module=ALLOW_ALL)
    assert replay_turn_command(settings, correlation_id=WITH_REFS, as_json=False, out=out, err=err) == 0
    text = out.getvalue()
    assert text.startswith(f"replay turn {WITH_REFS} (thread thread-00002") and ": OK" in text.splitlines()[0]
    assert "PASS context_digest" in text

    out = io.StringIO()
    code = replay_turn_command(
        settings,
        correlation_id=WITH_REFS,
        as_json=True,
        out=out,
        err=err,
        policy_module="turngate.policies.deny_all",
    )
    assert code == 1 and json.loads(out.getvalue())["ok"] is False


async def test_a_divergent_history_is_reported_per_workflow() -> None:
    from temporalio.client import WorkflowHistory

    histories = Path(__file__).parents[1] / "replay" / "histories"

    async def load():
        for name in ("allow_with_refs", "divergent_provider_activity"):
            yield WorkflowHistory.from_json(f"wf-{name}", (histories / f"{name}.json").read_text())

    report = await replay_histories(load())
    assert report.checked == 2 and report.failed == 1 and not report.ok
    by_id = {result.workflow_id: result for result in report.results}
    assert by_id["wf-allow_with_refs"].ok
    assert "nondetermin" in (by_id["wf-divergent_provider_activity"].error or "").lower()
