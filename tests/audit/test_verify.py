"""verify_all: an untouched ledger verifies; every kind of tampering is reported, nothing repaired."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import turngate.audit.forked_ranges as forked_ranges
import turngate.audit.verification.event_cache as event_cache
import turngate.audit.verification.event_checks as event_checks
import turngate.audit.verification.run as verify_run
from tests.audit.helpers import Ledger, config, kinds, make_ledger
from turngate.artifacts import LocalArtifactStore
from turngate.artifacts.configs import store_context_config
from turngate.audit import AuditKind, verify_all
from turngate.core.context import load_context_config
from turngate.core.decision import decide
from turngate.core.events import EventDraft, EventKind, parse_intent
from turngate.core.policy import load_policy

TURNS = 30  # 6 threads of 5 turns; turns 6, 13, 20, 27 end in a REF_NOT_FOUND DENY


@pytest.fixture(autouse=True, params=["one process", "three processes"])
def processes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test twice: verified in this process, and split into three index ranges verified
    in forked processes (the report must be the same)."""
    if request.param == "three processes":
        monkeypatch.setattr(verify_run, "PARALLEL_MIN_EVENTS", 0)
        monkeypatch.setattr(forked_ranges, "usable_cores", lambda: 3)
        monkeypatch.setattr(forked_ranges, "can_fork", lambda: True)
    return request.param


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    built = make_ledger(tmp_path / "data", TURNS, threads=6, deny_every=7)
    yield built
    built.store.close()


def verify(ledger: Ledger, **kw: object):
    kw.setdefault("artifacts", ledger.artifacts())
    kw.setdefault("context_config", config())
    return verify_all(ledger.store, **kw)


def test_an_untouched_ledger_verifies(ledger: Ledger) -> None:
    report = verify(ledger)
    assert report.ok, report.failures
    assert report.checked_events == ledger.built.events == 3 * TURNS - 4
    assert report.checked_decisions == TURNS
    assert report.checked_artifacts == ledger.built.artifacts == 2 * TURNS - 4
    assert report.head_index == ledger.built.events - 1
    assert report.head_digest == ledger.store.head()[1]
    assert report.context_config_digest.startswith("sha256:")
    assert report.warnings == report.info == []
    assert report.events_per_s > 0


def test_every_event_is_streamed_in_one_pass(ledger: Ledger) -> None:
    seen: list[tuple[int, int]] = []
    report = verify(ledger, batch_size=7, progress=lambda done, total: seen.append((done, total)), workers=1)
    assert report.ok
    total = 2 * ledger.built.events  # each event: digests and chain, then decisions and artifacts
    assert seen[-1] == (total, total)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    assert len(seen) >= ledger.built.events // 7


def test_caches_that_overflow_fall_back_to_the_ledger(ledger: Ledger, monkeypatch) -> None:
    monkeypatch.setattr(event_checks, "PENDING_INTENTS", 2)
    monkeypatch.setattr(event_checks, "CHECKED_ARTIFACTS", 1)
    monkeypatch.setattr(event_checks, "RECENT_EVENTS", 3)
    monkeypatch.setattr(event_cache, "RECENT_EVENTS", 3)
    report = verify(ledger, batch_size=5)
    assert report.ok, report.failures
    assert report.checked_decisions == TURNS


def test_an_empty_ledger_verifies(tmp_path: Path) -> None:
    ledger = make_ledger(tmp_path, 0)
    report = verify(ledger)
    assert report.ok and report.checked_events == 0 and report.head_index is None
    ledger.store.close()


@pytest.mark.parametrize(
    ("kind", "old", "new"),
    [
        ("INTENT", "please", "plEase"),
        ("DECISION", "allow_all", "allow_alL"),
        ("EXECUTION", "echo: ", "ecHo: "),
    ],
)
def test_a_changed_byte_in_any_payload_is_reported(ledger: Ledger, kind: str, old: str, new: str) -> None:
    row = ledger.row("c-0000008", kind)
    assert old in row["payload"]
    changed = row["payload"].replace(old, new, 1)
    ledger.execute('UPDATE events SET payload = ? WHERE "index" = ?', (changed, row["index"]))
    report = verify(ledger)
    assert not report.ok
    assert ("digest_mismatch", row["index"]) in kinds(report.failures)
    finding = next(f for f in report.failures if f.kind == AuditKind.DIGEST_MISMATCH)
    assert finding.correlation_id == "c-0000008"
    if kind == "INTENT":  # the DECISION's input no longer recomputes either
        decision = ledger.row("c-0000008", "DECISION")
        assert ("input_digest_mismatch", decision["index"]) in kinds(report.failures)


def test_a_deleted_event_is_reported(ledger: Ledger) -> None:
    row = ledger.row("c-0000008", "EXECUTION")
    ledger.execute('DELETE FROM events WHERE "index" = ?', (row["index"],))
    report = verify(ledger)
    assert ("index_gap", row["index"]) in kinds(report.failures)


def test_a_deleted_intent_leaves_its_decision_unverifiable(ledger: Ledger) -> None:
    intent, decision = ledger.row("c-0000009", "INTENT"), ledger.row("c-0000009", "DECISION")
    ledger.execute('DELETE FROM events WHERE "index" = ?', (intent["index"],))
    found = kinds(verify(ledger).failures)
    assert ("index_gap", intent["index"]) in found
    assert ("decision_without_intent", decision["index"]) in found


def test_a_reordered_pair_is_reported(ledger: Ledger) -> None:
    first = ledger.row("c-0000008", "DECISION")["index"]
    assert ledger.row("c-0000008", "EXECUTION")["index"] == first + 1
    ledger.drop_triggers()
    with ledger.raw() as conn:
        conn.execute('UPDATE events SET "index" = -1 WHERE "index" = ?', (first,))
        conn.execute('UPDATE events SET "index" = ? WHERE "index" = ?', (first, first + 1))
        conn.execute('UPDATE events SET "index" = ? WHERE "index" = -1', (first + 1,))
    found = kinds(verify(ledger).failures)
    assert ("digest_mismatch", first) in found
    assert ("digest_mismatch", first + 1) in found
    assert ("execution_without_allow", first) in found  # the EXECUTION now precedes its DECISION


def test_changed_and_missing_artifacts_are_reported(ledger: Ledger) -> None:
    decision, execution = ledger.row("c-0000008", "DECISION"), ledger.row("c-0000008", "EXECUTION")
    changed = ledger.artifacts_root / json.loads(decision["payload"])["manifest"]["path"]
    changed.write_bytes(changed.read_bytes().replace(b"decision", b"Decision", 1))
    gone = ledger.artifacts_root / json.loads(execution["payload"])["manifest"]["path"]
    gone.unlink()
    report = verify(ledger)
    assert kinds(report.failures) == [
        ("artifact_mismatch", decision["index"]),
        ("artifact_missing", execution["index"]),
    ]
    assert "do not hash to the pointer's sha256" in report.failures[0].detail
    assert changed.exists()  # reported, never repaired or deleted
    no_store = verify(ledger, artifacts=None)
    assert no_store.ok and kinds(no_store.warnings) == [("artifacts_not_checked", None)]


def _turn_with_pointers(
    ledger: Ledger, store: LocalArtifactStore, extra: list[dict], output: dict | None = None
) -> int:
    """Append a turn whose EXECUTION carries pointers in the fields the gateway writes and
    pointer-shaped data in a field it does not (``tools``); returns its index."""
    intent = ledger.store.append(
        parse_intent(
            {
                "interface_version": 3,
                "correlation_id": "c-pointers",
                "payload": {"intent_type": "chat.message", "thread_id": "t-p", "payload": {"message": "hi"}},
            }
        ).draft()
    )
    outcome = decide(intent, [], config(), load_policy("turngate.policies.allow_all"))
    snapshot = store.put(b"the exact prompt bytes", kind="prompt_snapshot", retention="snapshot")
    answer = store.put(b"the whole answer", kind="output")
    nested = store.put(b"raw tool output", kind="tool_output")
    fields = {k: intent.model_dump()[k] for k in ("thread_id", "turn_id", "correlation_id")}
    payload = {
        "context_digest": outcome.context_digest,
        "output_text": "hi",
        "output_artifact": output or answer.model_dump(mode="json"),
        "fault_snapshots": {"prompt_snapshot": snapshot.model_dump(mode="json")},
        "tools": [{"calls": [{"output": nested.model_dump(mode="json")}]}, *extra],
    }
    decision_draft = EventDraft(kind=EventKind.DECISION, payload=outcome.payload, **fields)
    execution_draft = EventDraft(kind=EventKind.EXECUTION, payload=payload, **fields)
    return ledger.store.append_many([decision_draft, execution_draft])[1].index


def test_server_written_pointers_are_checked_and_snapshots_may_expire(ledger: Ledger) -> None:
    store = ledger.artifacts()
    index = _turn_with_pointers(ledger, store, [])
    report = verify(ledger)
    assert report.ok, report.failures
    assert report.checked_artifacts == ledger.built.artifacts + 2

    execution = json.loads(ledger.rows('"index" = ?', (index,))[0]["payload"])
    (ledger.artifacts_root / execution["fault_snapshots"]["prompt_snapshot"]["path"]).unlink()
    assert kinds(verify(ledger).failures) == [("artifact_missing", index)]  # no grace: a failure
    assert kinds(verify(ledger, snapshot_grace=timedelta(days=1)).failures) == [("artifact_missing", index)]
    expired = verify(ledger, snapshot_grace=timedelta(0))  # gc'd: older than the grace period
    assert expired.ok and kinds(expired.info) == [("expired_snapshot", index)]

    (ledger.artifacts_root / execution["output_artifact"]["path"]).write_bytes(b"the answer, edited")
    assert ("artifact_mismatch", index) in kinds(verify(ledger, snapshot_grace=timedelta(0)).failures)


def test_pointer_shaped_data_outside_the_gateways_fields_is_not_checked(ledger: Ledger) -> None:
    store = ledger.artifacts()
    bad = {"artifact_id": "x", "path": "../../etc/passwd", "sha256": "sha256:" + "0" * 64, "size_bytes": 1}
    index = _turn_with_pointers(ledger, store, [bad])
    execution = json.loads(ledger.rows('"index" = ?', (index,))[0]["payload"])
    (ledger.artifacts_root / execution["tools"][0]["calls"][0]["output"]["path"]).unlink()
    report = verify(ledger)
    assert report.ok, report.failures
    assert report.checked_artifacts == ledger.built.artifacts + 2


def test_an_invalid_pointer_in_a_gateway_field_is_reported(ledger: Ledger) -> None:
    bad = {"artifact_id": "x", "path": "../../etc/passwd", "sha256": "sha256:" + "0" * 64, "size_bytes": 1}
    index = _turn_with_pointers(ledger, ledger.artifacts(), [], output=bad)
    assert kinds(verify(ledger).failures) == [("artifact_pointer_invalid", index)]


def test_a_decision_under_a_config_not_had_is_unchecked_and_not_ok(ledger: Ledger) -> None:
    other = load_context_config(None, {"TURNGATE_CONTEXT_MAX_REFS": "7"})
    report = verify(ledger, context_config=other)
    # Nothing failed, but no DECISION was recomputed: not ok, and the report says why.
    assert report.failures == [] and not report.ok
    assert report.unchecked_decisions == TURNS and report.checked_decisions == 0
    first = ledger.rows("kind = 'DECISION'")[0]
    assert kinds(report.unchecked) == [("config_unavailable", first["index"])]
    assert f"{TURNS} DECISION(s)" in report.unchecked[0].detail
    assert "no config is stored under that digest" in report.unchecked[0].detail
    allowed = verify(ledger, context_config=other, allow_unchecked=True)
    assert allowed.ok and allowed.unchecked_decisions == TURNS and allowed.allow_unchecked
    known = verify(ledger, context_config=other, known_configs=[config()])
    assert known.ok and known.unchecked == [] and known.checked_decisions == TURNS
    assert kinds(known.info) == [("config_drift", first["index"])]


def test_a_decision_under_a_stored_config_is_recomputed_with_it(ledger: Ledger) -> None:
    store_context_config(ledger.artifacts(), config())
    other = load_context_config(None, {"TURNGATE_CONTEXT_MAX_REFS": "7"})
    report = verify(ledger, context_config=other)
    assert report.ok, (report.failures, report.unchecked)
    assert report.checked_decisions == TURNS and report.unchecked_decisions == 0
    first = ledger.rows("kind = 'DECISION'")[0]
    assert kinds(report.info) == [("config_drift", first["index"])]
    assert "recomputed with the config stored at standard/context_config/" in report.info[0].detail
    # Without the artifact store, the stored config cannot be had.
    blind = verify(ledger, context_config=other, artifacts=None)
    assert not blind.ok and blind.unchecked_decisions == TURNS
    assert "no artifact store was given" in blind.unchecked[0].detail


def test_an_altered_stored_config_is_a_failure(ledger: Ledger) -> None:
    pointer = store_context_config(ledger.artifacts(), config())
    path = ledger.artifacts_root / pointer.path
    path.write_bytes(path.read_bytes().replace(b'"max_refs":50', b'"max_refs":51'))
    other = load_context_config(None, {"TURNGATE_CONTEXT_MAX_REFS": "7"})
    report = verify(ledger, context_config=other, allow_unchecked=True)
    first = ledger.rows("kind = 'DECISION'")[0]
    assert kinds(report.failures) == [("config_mismatch", first["index"])] and not report.ok
    assert report.unchecked_decisions == TURNS and "altered or corrupt" in report.unchecked[0].detail


LAST = "c-0000029"  # the last turn: resealing after its DECISION touches only its EXECUTION
REFERENCED = "c-0000023"  # the turn it references (same thread)


def test_a_config_digest_that_is_no_digest_is_unchecked(ledger: Ledger) -> None:
    decision = ledger.row(LAST, "DECISION")
    ledger.edit_payload(
        decision["index"], lambda p: p.update(boundary={"context_config_digest": "x/../y"}), reseal=True
    )
    report = verify(ledger)
    assert report.failures == [] and not report.ok
    assert report.unchecked_decisions == 1 and report.checked_decisions == TURNS - 1
    assert kinds(report.unchecked) == [("config_unavailable", decision["index"])]
    assert "the config cannot be used: 'x/../y' is not a sha256 digest" in report.unchecked[0].detail


def test_a_shadow_entry_of_a_policy_that_does_not_load_is_a_warning(ledger: Ledger) -> None:
    decision = ledger.row(LAST, "DECISION")
    entry = {
        "policy_id": "acme.retired",
        "policy_version": "3",
        "config_digest": "sha256:" + "a" * 64,
        "decision": "DENY",
        "reason_codes": ["acme.no"],
    }
    ledger.edit_payload(decision["index"], lambda p: p.update(shadow=[entry]), reseal=True)
    report = verify(ledger)
    assert report.ok and report.failures == [] and report.checked_decisions == TURNS
    assert kinds(report.warnings) == [("shadow_not_rerun", decision["index"])]
    assert report.warnings[0].detail.startswith(
        f"1 DECISION(s) (index {decision['index']}..{decision['index']}) hold a shadow entry of "
        f"acme.retired v3, config sha256:{'a' * 64}, not re-run"
    )


def test_a_resealed_decision_whose_context_digest_does_not_recompute(ledger: Ledger) -> None:
    decision, execution = ledger.row(LAST, "DECISION"), ledger.row(LAST, "EXECUTION")
    assert execution["index"] == ledger.built.head_index
    forged = "sha256:" + hashlib.sha256(b"forged").hexdigest()
    ledger.edit_payload(decision["index"], lambda p: p.update(context_digest=forged), reseal=True)
    report = verify(ledger)
    # The chain is consistent again; only recomputing the context from stored inputs catches it.
    assert kinds(report.failures) == [
        ("context_digest_mismatch", decision["index"]),
        ("execution_context_mismatch", execution["index"]),
    ]
    assert report.head_digest != ledger.built.head_digest


def test_a_resealed_tail_breaks_the_pins_of_later_decisions(ledger: Ledger) -> None:
    intent = ledger.row("c-0000002", "INTENT")
    ledger.edit_payload(intent["index"], lambda p: p["payload"].update(message="forged"), reseal=True)
    found = kinds(verify(ledger).failures)
    assert not any(kind in ("digest_mismatch", "chain_break") for kind, _ in found)
    # Turn 8 references turn 2: its DECISION pinned the old INTENT digest.
    later = ledger.row("c-0000008", "DECISION")["index"]
    assert ("resolved_refs_mismatch", later) in found
    assert ("context_digest_mismatch", later) in found


def test_an_execution_digest_among_normative_inputs_is_an_observation_leak(ledger: Ledger) -> None:
    decision = ledger.row(LAST, "DECISION")
    observed = ledger.row(REFERENCED, "EXECUTION")["digest"]
    ledger.edit_payload(
        decision["index"], lambda p: p["normative_input_digests"].append(observed), reseal=True
    )
    found = kinds(verify(ledger).failures)
    assert ("observation_leak", decision["index"]) in found
    assert ("normative_inputs_mismatch", decision["index"]) in found
    assert not any(kind in ("digest_mismatch", "chain_break") for kind, _ in found)


def test_an_unknown_normative_digest_is_reported(ledger: Ledger) -> None:
    decision = ledger.row(LAST, "DECISION")
    unknown = "sha256:" + "1" * 64
    ledger.edit_payload(
        decision["index"], lambda p: p["normative_input_digests"].append(unknown), reseal=True
    )
    assert ("normative_input_unknown", decision["index"]) in kinds(verify(ledger).failures)


def test_an_execution_without_an_allow_is_reported(ledger: Ledger) -> None:
    decision, execution = ledger.row(LAST, "DECISION"), ledger.row(LAST, "EXECUTION")
    ledger.edit_payload(decision["index"], lambda p: p.update(decision="DENY"), reseal=True)
    assert kinds(verify(ledger).failures) == [("execution_without_allow", execution["index"])]


def test_thread_and_index_range_scopes(ledger: Ledger) -> None:
    thread = ledger.rows("thread_id = ?", ("thread-00002",))
    report = verify(ledger, thread_id="thread-00002")
    assert report.ok, report.failures
    assert report.checked_events == len(thread) and report.head_index == thread[-1]["index"]
    assert report.checked_decisions == 5

    ranged = verify(ledger, since_index=10, until_index=40)
    assert ranged.ok, ranged.failures
    assert ranged.checked_events == 31 and ranged.head_index == 40

    # The range's first link is checked against the recomputed digest of the event before it.
    assert ledger.rows('"index" = 9')[0]["kind"] == "EXECUTION"
    ledger.edit_payload(9, lambda p: p.update(output_text="forged"), reseal=False)
    ranged = verify(ledger, since_index=10, until_index=40)
    assert ("chain_break", 10) in kinds(ranged.failures)
    assert all(f.index is not None and 10 <= f.index <= 40 for f in ranged.failures)


SCALE_TURNS = 10_000  # "verify passes on an untouched ledger of 10,000 turns" (~15 s)


@pytest.fixture(scope="module")
def scale_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    """Built once (~8 s), verified by each process mode; only read, never edited."""
    ledger = make_ledger(tmp_path_factory.mktemp("scale"), SCALE_TURNS)
    yield ledger
    ledger.store.close()


def test_a_ledger_of_ten_thousand_turns_verifies(scale_ledger: Ledger) -> None:
    ledger = scale_ledger
    report = verify(ledger)
    assert report.ok, report.failures[:5]
    assert report.checked_events == ledger.built.events > 2.9 * SCALE_TURNS
    assert report.checked_decisions == SCALE_TURNS
    assert report.checked_artifacts == ledger.built.artifacts
