"""decide(): the DECISION payload, ref errors as DENY, policy failures, replay/verify."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turngate.core.canonical import canonical_bytes
from turngate.core.context import ContextConfig, context_config_digest, load_context_config
from turngate.core.decision import decide, recompute_decision_digests, verify_decision
from turngate.core.events import Event
from turngate.core.policy import LoadedPolicy, PolicyDecision, clear_policy_cache, load_policy

CFG = ContextConfig()
EXECUTION = {"provider": "echo", "requested_model_id": None, "resolved_model_id": "echo-1"}


def ev(ref_id: str, ref_type: str = "event") -> dict[str, str]:
    return {"ref_type": ref_type, "ref_id": ref_id}


@pytest.fixture(autouse=True)
def _fresh_policy_cache():
    clear_policy_cache()
    yield
    clear_policy_cache()


class Recorder:
    policy_id = "test.recorder"
    policy_version = "3"

    def __init__(self, result=None, error: Exception | None = None) -> None:
        self.calls = 0
        self.result = result if result is not None else PolicyDecision.allow("test.ok")
        self.error = error

    def config(self) -> dict:
        return {"k": 1}

    def evaluate(self, policy_input):
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.result


def loaded(policy) -> LoadedPolicy:
    return LoadedPolicy(policy, policy.policy_id, policy.policy_version, "sha256:" + "1" * 64, None, "POLICY")


def example(chain, refs=None):
    i1, _, x1 = chain.turn("T", "1", "What is 2+2?", "2+2 equals 4")
    current = chain.intent(
        "T",
        "2",
        "Explain more",
        parent="1",
        refs=refs if refs is not None else [ev("1"), ev("1", "execution")],
    )
    return i1, x1, current


def test_allow_payload_shape(new_chain):
    chain = new_chain()
    i1, x1, current = example(chain)
    policy = load_policy("turngate.policies.allow_all")
    outcome = decide(current, chain.candidates_for(current), CFG, policy, execution=EXECUTION)
    payload = outcome.payload
    assert outcome.allowed
    assert set(payload) == {
        "decision",
        "reason_codes",
        "policy",
        "policy_id",
        "policy_version",
        "context_digest",
        "context_spec",
        "boundary",
        "normative_input_digests",
        "resolved_refs",
        "provider",
        "requested_model_id",
        "resolved_model_id",
    }
    assert payload["decision"] == "ALLOW"
    assert payload["reason_codes"] == ["policy.allow_all"]
    assert payload["policy"] == {
        "policy_id": "turngate.allow_all",
        "policy_version": "1",
        "config_digest": policy.config_digest,
    }
    assert (payload["policy_id"], payload["policy_version"]) == ("turngate.allow_all", "1")
    assert payload["boundary"] == {"context_config_digest": context_config_digest(CFG)}
    assert payload["context_digest"] == outcome.context_digest
    assert payload["context_spec"] == outcome.context_spec
    assert payload["normative_input_digests"] == [i1.digest]
    assert [r["event_digest"] for r in payload["resolved_refs"]] == [i1.digest, x1.digest]
    assert payload["resolved_model_id"] == "echo-1"
    # JSON, canonicalizable, no timestamps, no EXECUTION output
    text = canonical_bytes(payload).decode()
    assert "2+2 equals 4" not in text and "2024-01-01" not in text
    assert json.loads(json.dumps(payload)) == payload


@pytest.mark.parametrize(
    ("refs", "code"),
    [
        ([ev("missing")], "REF_NOT_FOUND"),
        ([ev("c-OTHER-o1")], "CROSS_THREAD_REF"),
        ([ev("1")] * 51, "MAX_REFS_EXCEEDED"),
        ([], "EMPTY_REFS_DENIED"),
        ([{"ref_type": "blob.store", "ref_id": "h"}], "REF_INVALID"),
    ],
)
def test_ref_errors_deny_with_the_seed_code_and_skip_the_policy(new_chain, refs, code):
    chain = new_chain()
    chain.turn("OTHER", "o1", "elsewhere")
    _, _, current = example(chain, refs=refs)
    recorder = Recorder()
    outcome = decide(current, chain.candidates_for(current), CFG, loaded(recorder), execution=EXECUTION)
    assert recorder.calls == 0
    assert not outcome.allowed
    assert outcome.resolution is None and outcome.context_spec is None
    payload = outcome.payload
    assert payload["decision"] == "DENY"
    assert payload["reason_codes"] == [code]
    assert payload["error"]["code"] == code
    assert set(payload["error"]) == {"code", "detail", "ref_id"}
    assert payload["context_digest"] is None
    assert payload["resolved_refs"] == [] and payload["normative_input_digests"] == []
    assert payload["policy_id"] == "test.recorder"
    assert payload["boundary"] == {"context_config_digest": context_config_digest(CFG)}
    again = recompute_decision_digests(current, chain.candidates_for(current), CFG)
    assert again["error_code"] == code
    assert verify_decision(payload, current, chain.candidates_for(current), CFG) == []


def test_policy_exceptions_and_bad_results_deny(new_chain):
    chain = new_chain()
    _, _, current = example(chain)
    cands = chain.candidates_for(current)
    boom = decide(current, cands, CFG, loaded(Recorder(error=KeyError("x"))))
    assert boom.payload["reason_codes"] == ["policy.evaluation_error"]
    assert boom.payload["error"]["code"] == "policy.evaluation_error"
    assert boom.payload["context_digest"] is not None
    garbage = decide(current, cands, CFG, loaded(Recorder(result="ALLOW")))
    assert garbage.payload["reason_codes"] == ["policy.invalid_decision"]
    as_dict = decide(
        current, cands, CFG, loaded(Recorder(result={"decision": "ALLOW", "reason_codes": ["a"]}))
    )
    assert as_dict.allowed


def test_execution_mapping_holds_only_the_plan(new_chain):
    chain = new_chain()
    _, _, current = example(chain)
    policy = load_policy("turngate.policies.allow_all")
    with pytest.raises(ValueError, match="decision\n  Extra inputs are not permitted"):
        decide(
            current, chain.candidates_for(current), CFG, policy, execution=EXECUTION | {"decision": "ALLOW"}
        )
    with pytest.raises(ValueError, match="temperature\n  Extra inputs are not permitted"):
        decide(
            current, chain.candidates_for(current), CFG, policy, execution=EXECUTION | {"temperature": 0.2}
        )


def test_decide_refuses_non_intents(new_chain):
    chain = new_chain()
    _, x1, _ = example(chain)
    with pytest.raises(ValueError):
        decide(x1, [], CFG, load_policy(None))


def test_intent_without_message_is_denied(new_chain):
    chain = new_chain()
    intent = chain.intent("T", "1", "hello")
    broken = intent.model_copy(update={"payload": {**intent.payload, "payload": {}}})
    outcome = decide(broken, [], CFG, load_policy("turngate.policies.allow_all"))
    assert outcome.payload["reason_codes"] == ["INTENT_INVALID"]


def test_verify_recomputes_and_detects_tampering(new_chain):
    chain = new_chain()
    i1, _, current = example(chain)
    policy = load_policy("turngate.policies.allow_all")
    stored = decide(current, chain.candidates_for(current), CFG, policy, execution=EXECUTION).payload
    stored = json.loads(json.dumps(stored))  # as read back from the ledger
    reloaded = [Event.model_validate(json.loads(e.model_dump_json())) for e in chain.events]
    intent = reloaded[current.index]
    assert verify_decision(stored, intent, chain.candidates_for(intent), CFG, policy) == []

    # a referenced INTENT edited in storage (digest column left alone)
    tampered = [
        e.model_copy(update={"payload": {**e.payload, "payload": {"message": "What is 9+9?"}}})
        if e.index == i1.index
        else e
        for e in reloaded
    ]
    problems = verify_decision(stored, intent, tampered[: intent.index], CFG)
    assert any(p.startswith("event_digest_mismatch: index 0") for p in problems)
    assert "context_digest differs from the recomputation" in problems

    # a different config than the one pinned
    other = load_context_config(None, {"TURNGATE_CONTEXT_MAX_REFS": "9"})
    problems = verify_decision(stored, intent, chain.candidates_for(intent), other)
    assert "context_config_digest differs from the reloaded config" in problems

    # a different policy than the one that decided
    problems = verify_decision(
        stored, intent, chain.candidates_for(intent), CFG, load_policy("turngate.policies.deny_all")
    )
    assert "decision differs from the re-evaluated policy" in problems


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(outputs=st.lists(st.text(min_size=3, max_size=20), min_size=1, max_size=4))
def test_policy_never_receives_execution_payloads(new_chain, outputs):
    chain = new_chain()
    refs = []
    for n, output in enumerate(outputs):
        chain.turn("T", str(n), f"question {n}", f"OUT<{output}>")
        refs += [ev(str(n)), ev(str(n), "execution")]
    execs = [e for e in chain.events if e.kind == "EXECUTION"]
    refs += [ev(x.digest) for x in execs]
    current = chain.intent("T", "now", "q", parent="0", refs=refs)
    recorder = Recorder()
    outcome = decide(current, chain.candidates_for(current), CFG, loaded(recorder))
    assert recorder.calls == 1
    seen = outcome.policy_input.model_dump_json()
    for output in outputs:
        assert f"OUT<{output}>" not in seen
    for x in execs:
        assert x.digest not in seen
    assert {item.event_kind for item in outcome.policy_input.i_context} == {"INTENT"}
    assert len(outcome.resolution.execution_events) == len(execs)


def test_pinned_prompt_enters_the_context_digest_and_verifies(new_chain):
    chain = new_chain()
    intent = chain.intent("t", "1", "hello")
    allow = load_policy("turngate.policies.allow_all")
    prompt_a = {"snapshot_digest": "sha256:" + "a" * 64, "profile_digest": "sha256:" + "b" * 64}
    prompt_b = {**prompt_a, "snapshot_digest": "sha256:" + "c" * 64}
    with_a = decide(intent, [], CFG, allow, prompt=prompt_a)
    with_b = decide(intent, [], CFG, allow, prompt=prompt_b)
    without = decide(intent, [], CFG, allow)
    assert with_a.payload["context_spec"]["prompt"] == prompt_a
    assert (
        len(
            {
                with_a.payload["context_digest"],
                with_b.payload["context_digest"],
                without.payload["context_digest"],
            }
        )
        == 3
    )
    assert verify_decision(with_a.payload, intent, [], CFG, allow) == []
    tampered = json.loads(json.dumps(with_a.payload))
    tampered["context_spec"]["prompt"]["snapshot_digest"] = prompt_b["snapshot_digest"]
    assert "context_digest differs from the recomputation" in verify_decision(tampered, intent, [], CFG)


# ---- context spec version 3 (event refs name whole turns) next to earlier DECISIONs


def test_v3_decisions_and_earlier_ones_both_verify(new_chain):
    """A DECISION recorded under version 1 (event ref = the INTENT only) still verifies after
    version 3 exists, and a version 3 DECISION of the same INTENT pins the EXECUTION too."""
    chain = new_chain()
    i1, x1, current = example(chain, refs=[ev("c-T-1"), ev("1")])
    policy = load_policy("turngate.policies.allow_all")
    cands = chain.candidates_for(current)
    v1 = json.loads(
        json.dumps(decide(current, cands, CFG, policy, schema_version="turngate.ctxspec.1").payload)
    )
    v3 = json.loads(
        json.dumps(decide(current, cands, CFG, policy, schema_version="turngate.ctxspec.3").payload)
    )
    assert [r["event_digest"] for r in v1["resolved_refs"]] == [i1.digest]
    assert [(r["event_digest"], r["admitted_for"]) for r in v3["resolved_refs"]] == [
        (i1.digest, "governance"),
        (x1.digest, "execution_only"),
    ]
    assert v3["context_spec"]["assembly_rules"]["schema_version"] == "turngate.ctxspec.3"
    assert "EXPAND_TURN_REFS" in v3["context_spec"]["retrieval"]["normalization"]["applied_rules"]
    assert "external_refs" not in v3["context_spec"]  # declared none
    assert v1["context_digest"] != v3["context_digest"]
    assert v1["normative_input_digests"] == v3["normative_input_digests"] == [i1.digest]
    for stored in (v1, v3):
        assert verify_decision(stored, current, cands, CFG, policy) == []
    # Relabelling a v1 DECISION as v3 (or the reverse) is caught.
    relabelled = json.loads(json.dumps(v1))
    relabelled["context_spec"]["assembly_rules"]["schema_version"] = "turngate.ctxspec.3"
    assert "context_digest differs from the recomputation" in verify_decision(relabelled, current, cands, CFG)


def test_empty_refs_first_turn_deny_is_pinned_and_verifies(new_chain):
    chain = new_chain()
    first = chain.intent("T", "1", "hello")
    strict = load_context_config(None, {"TURNGATE_CONTEXT_EMPTY_REFS_FIRST_TURN": "deny"})
    assert strict.context.empty_refs_first_turn == "DENY"
    assert context_config_digest(strict) != context_config_digest(CFG)
    # Leaving the option at its default keeps the digest every earlier DECISION pinned.
    assert context_config_digest(
        ContextConfig.model_validate({"context": {"empty_refs_first_turn": "ALLOW"}})
    ) == (context_config_digest(CFG))
    policy = load_policy("turngate.policies.allow_all")
    denied = json.loads(json.dumps(decide(first, [], strict, policy).payload))
    assert (denied["decision"], denied["reason_codes"]) == ("DENY", ["EMPTY_REFS_DENIED"])
    assert verify_decision(denied, first, [], strict, policy) == []
    allowed = json.loads(json.dumps(decide(first, [], CFG, policy).payload))
    assert allowed["decision"] == "ALLOW"
    assert verify_decision(allowed, first, [], CFG, policy) == []
    with pytest.raises(ValueError, match="ALLOW or DENY"):
        load_context_config(None, {"TURNGATE_CONTEXT_EMPTY_REFS_FIRST_TURN": "maybe"})


def test_v3_keeps_the_external_refs_scope_of_a_turn_that_declares_them(new_chain):
    """Version 3 has version 2's ``external_refs`` exactly when the turn declares external refs:
    what they resolved to stays inside the digest and verifies."""
    from turngate.core.context import with_external_resolution

    chain = new_chain()
    i1, x1, current = example(
        chain, refs=[ev("1"), {"ref_type": "case_query", "case_id": "c1", "query": "q", "top_k": 2}]
    )
    policy = load_policy("turngate.policies.allow_all")
    cands = chain.candidates_for(current)
    outcome = decide(current, cands, CFG, policy, schema_version="turngate.ctxspec.3")
    assert outcome.context_spec is not None and outcome.assembled_context is not None
    assert outcome.context_spec["external_refs"]["resolved"] is None
    assert [r.event_digest for r in outcome.resolution.resolved_refs] == [i1.digest, x1.digest]
    resolved = [{"ref_type": "case_query", "case_id": "c1", "selected_chunk_ids": ["a"]}]
    spec, digest = with_external_resolution(outcome.context_spec, outcome.assembled_context, resolved)
    assert digest != outcome.context_digest
    stored = json.loads(
        json.dumps(
            outcome.payload | {"context_spec": spec, "context_digest": digest, "external_context": resolved}
        )
    )
    assert verify_decision(stored, current, cands, CFG, policy) == []
    swapped = stored | {"external_context": [{**resolved[0], "selected_chunk_ids": ["b"]}]}
    assert "context_digest differs from the recomputation" in verify_decision(swapped, current, cands, CFG)
