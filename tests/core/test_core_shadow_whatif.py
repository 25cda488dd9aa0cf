"""Shadow entries (core/shadow.py) and re-deciding a recorded turn (core/whatif.py)."""

from __future__ import annotations

import pytest

from turngate.core.canonical import canonical_bytes
from turngate.core.context import ContextConfig
from turngate.core.decision import decide
from turngate.core.policy import LoadedPolicy, PolicyDecision, clear_policy_cache, load_policy
from turngate.core.shadow import shadow_problems, with_shadows
from turngate.core.whatif import Change, gated_after_policy, redecide

CFG = ContextConfig()
MAX_USER = "turngate.policies.max_user_messages"


@pytest.fixture(autouse=True)
def _fresh_policy_cache():
    clear_policy_cache()
    yield
    clear_policy_cache()


class Raises:
    policy_id = "test.raises"
    policy_version = "1"

    def config(self) -> dict:
        return {}

    def evaluate(self, policy_input):
        raise RuntimeError("broken shadow")


class Limit:
    """max_user_messages-like, with the limit in its config (so the digest changes with it)."""

    policy_id = "test.limit"
    policy_version = "1"

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def config(self) -> dict:
        return {"limit": self.limit}

    def evaluate(self, policy_input):
        count = 1 + sum(1 for item in policy_input.i_context if item.message is not None)
        return PolicyDecision.deny("over") if count > self.limit else PolicyDecision.allow("within")


def loaded(policy) -> LoadedPolicy:
    from turngate.core.canonical import digest

    return LoadedPolicy(
        policy, policy.policy_id, policy.policy_version, digest(policy.config()), None, "POLICY"
    )


def thread(new_chain, turns: int):
    """A thread whose turn k declares every earlier turn; returns the chain and the INTENTs."""
    chain = new_chain()
    intents = []
    for k in range(turns):
        refs = [{"ref_type": "event", "ref_id": f"c-T-{j}"} for j in range(k)]
        intent = chain.intent("T", str(k), f"message {k}", parent=str(k - 1) if k else None, refs=refs)
        chain.decision(intent)
        intents.append(intent)
    return chain, intents


def test_no_shadow_keeps_the_payload_and_its_bytes(new_chain):
    chain, intents = thread(new_chain, 3)
    outcome = decide(
        intents[2], chain.candidates_for(intents[2]), CFG, load_policy("turngate.policies.allow_all")
    )
    assert with_shadows(outcome, []) is outcome
    assert "shadow" not in outcome.payload
    again = with_shadows(outcome, [loaded(Limit(5))])
    # The shadow is added beside the decision; every other byte of the payload is the same.
    assert {k: v for k, v in again.payload.items() if k != "shadow"} == outcome.payload
    assert canonical_bytes(outcome.payload) == canonical_bytes(
        decide(
            intents[2], chain.candidates_for(intents[2]), CFG, load_policy("turngate.policies.allow_all")
        ).payload
    )


@pytest.mark.parametrize(("limit", "shadow_decision"), [(2, "DENY"), (3, "ALLOW")])
def test_a_shadow_records_and_never_decides(new_chain, limit, shadow_decision):
    # The third turn carries 3 user messages: a limit of 2 denies it, 3 allows it.
    chain, intents = thread(new_chain, 3)
    shadow = loaded(Limit(limit))
    outcome = with_shadows(
        decide(intents[2], chain.candidates_for(intents[2]), CFG, load_policy("turngate.policies.allow_all")),
        [shadow],
    )
    assert outcome.allowed and outcome.payload["decision"] == "ALLOW"
    assert outcome.payload["reason_codes"] == ["policy.allow_all"]
    [entry] = outcome.payload["shadow"]
    assert entry == shadow.describe() | {
        "decision": shadow_decision,
        "reason_codes": ["over" if shadow_decision == "DENY" else "within"],
    }
    known = {(shadow.policy_id, shadow.policy_version, shadow.config_digest): shadow}
    assert shadow_problems(outcome.payload, outcome.policy_input, known) == ([], 0)


def test_a_raising_shadow_is_recorded_with_its_error(new_chain):
    chain, intents = thread(new_chain, 2)
    outcome = with_shadows(
        decide(intents[1], chain.candidates_for(intents[1]), CFG, load_policy("turngate.policies.allow_all")),
        [loaded(Raises())],
    )
    assert outcome.allowed
    [entry] = outcome.payload["shadow"]
    assert entry["decision"] == "DENY" and entry["reason_codes"] == ["policy.evaluation_error"]
    assert entry["error"] == {"code": "policy.evaluation_error", "detail": "RuntimeError: broken shadow"}


def test_a_ref_error_asks_no_shadow(new_chain):
    chain = new_chain()
    intent = chain.intent("T", "1", "hi", refs=[{"ref_type": "event", "ref_id": "missing"}])
    outcome = with_shadows(
        decide(intent, [], CFG, load_policy("turngate.policies.allow_all")), [loaded(Limit(1))]
    )
    assert outcome.payload["reason_codes"] == ["REF_NOT_FOUND"] and "shadow" not in outcome.payload


def test_shadow_problems_find_forged_and_malformed_entries(new_chain):
    chain, intents = thread(new_chain, 3)
    shadow = loaded(Limit(2))
    outcome = with_shadows(
        decide(intents[2], chain.candidates_for(intents[2]), CFG, load_policy("turngate.policies.allow_all")),
        [shadow],
    )
    known = {(shadow.policy_id, shadow.policy_version, shadow.config_digest): shadow}
    forged = outcome.payload | {"shadow": [outcome.payload["shadow"][0] | {"decision": "ALLOW"}]}
    problems, _ = shadow_problems(forged, outcome.policy_input, known)
    assert problems and problems[0].startswith("shadow_mismatch")
    unknown = outcome.payload | {"shadow": [outcome.payload["shadow"][0] | {"policy_version": "9"}]}
    assert shadow_problems(unknown, outcome.policy_input, known) == ([], 1)
    lacking = outcome.payload | {"shadow": [{"policy_id": "x"}]}
    assert shadow_problems(lacking, outcome.policy_input, known)[0][0].startswith("shadow_malformed")
    assert shadow_problems(outcome.payload | {"shadow": "no"}, outcome.policy_input, known)[0]
    assert shadow_problems(outcome.payload, None, known)[0]


@pytest.mark.parametrize(("limit", "flipped"), [(2, [2, 3]), (3, [3]), (4, [])])
def test_redecide_flips_exactly_the_turns_over_the_limit(new_chain, limit, flipped):
    chain, intents = thread(new_chain, 4)
    allow_all = load_policy("turngate.policies.allow_all")
    candidate = loaded(Limit(limit))
    changes = []
    for intent in intents:
        candidates = chain.candidates_for(intent)
        stored = decide(intent, candidates, CFG, allow_all).payload
        again = redecide(stored, intent, candidates, CFG, candidate)
        assert again.unreproducible is None
        changes.append(again.change)
    assert [k for k, change in enumerate(changes) if change == Change.ALLOW_TO_DENY] == flipped
    assert all(change == Change.REASONS for k, change in enumerate(changes) if k not in flipped)


def test_redecide_reports_inputs_that_do_not_recompute(new_chain):
    chain, intents = thread(new_chain, 3)
    allow_all = load_policy("turngate.policies.allow_all")
    stored = decide(intents[2], chain.candidates_for(intents[2]), CFG, allow_all).payload
    again = redecide(stored, intents[2], chain.candidates_for(intents[2])[:1], CFG, allow_all)
    assert again.candidate is None and again.unreproducible is not None
    same = redecide(stored, intents[2], chain.candidates_for(intents[2]), CFG, allow_all)
    assert same.change == Change.SAME and same.candidate == same.recorded


def test_redecide_reports_a_raising_candidate(new_chain):
    chain, intents = thread(new_chain, 2)
    stored = decide(
        intents[1], chain.candidates_for(intents[1]), CFG, load_policy("turngate.policies.allow_all")
    ).payload
    again = redecide(stored, intents[1], chain.candidates_for(intents[1]), CFG, loaded(Raises()))
    assert again.change == Change.ALLOW_TO_DENY
    assert again.error == {"code": "policy.error", "detail": "RuntimeError: broken shadow"}


@pytest.mark.parametrize(
    ("stored", "gated"),
    [
        ({"decision": "DENY", "reason_codes": ["model.unavailable"]}, True),
        ({"decision": "DENY", "reason_codes": ["SYSTEM_ERROR"], "error": {"code": "SYSTEM_ERROR"}}, True),
        ({"decision": "DENY", "reason_codes": ["x"], "error": {"code": "policy.evaluation_error"}}, False),
        ({"decision": "DENY", "reason_codes": ["policy.deny_all"]}, False),
        ({"decision": "ALLOW", "reason_codes": ["model.unavailable"]}, False),
    ],
)
def test_denials_after_the_policy_stand(stored, gated):
    assert gated_after_policy(stored, ref_error=False) is gated


def test_a_gated_turn_keeps_its_recorded_deny(new_chain):
    _chain, intents = thread(new_chain, 1)
    stored = decide(intents[0], [], CFG, load_policy("turngate.policies.allow_all")).payload
    stored = stored | {"decision": "DENY", "reason_codes": ["model.unavailable"]}
    again = redecide(stored, intents[0], [], CFG, load_policy("turngate.policies.allow_all"))
    assert again.change == Change.SAME
    denied = redecide(stored, intents[0], [], CFG, load_policy("turngate.policies.deny_all"))
    assert denied.change == Change.REASONS and denied.candidate.reason_codes == ["policy.deny_all"]
