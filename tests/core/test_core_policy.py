"""The policy interface: I_context holds INTENTs only; loading; the built-in policies."""

from __future__ import annotations

import importlib
import sys
import types

import pytest
from pydantic import ValidationError

from turngate.core.context import ContextConfig
from turngate.core.decision import decide
from turngate.core.policy import (
    OBSERVER_POLICY_ID,
    GovernanceItem,
    IntentView,
    LoadedPolicy,
    PolicyDecision,
    PolicyInput,
    PolicyLoadError,
    clear_policy_cache,
    load_policy,
)

CFG = ContextConfig()


def ev(ref_id: str, ref_type: str = "event") -> dict[str, str]:
    return {"ref_type": ref_type, "ref_id": ref_id}


@pytest.fixture(autouse=True)
def _fresh_policy_cache():
    clear_policy_cache()
    yield
    clear_policy_cache()


# --------------------------------------------------------------------------- I_context


def test_governance_item_refuses_execution_and_decision_events(new_chain):
    chain = new_chain()
    intent, decision, execution = chain.turn("T", "1", "hi", "secret output")
    assert GovernanceItem.from_event(intent).message == "hi"
    for event in (execution, decision):
        with pytest.raises(ValidationError, match="INTENT payloads only"):
            GovernanceItem.from_event(event)
        with pytest.raises(ValidationError, match="INTENT payloads only"):
            GovernanceItem.model_validate(event.model_dump(mode="json"))
    with pytest.raises(ValidationError):
        GovernanceItem(
            event_kind="EXECUTION",
            event_index=2,
            event_digest=execution.digest,
            actor="user",
            intent_type="chat.message",
            message="secret output",
        )


def test_policy_input_cannot_carry_execution_content(new_chain):
    chain = new_chain()
    intent, _, execution = chain.turn("T", "1", "hi", "secret output")
    view = IntentView.from_intent(intent)
    with pytest.raises(ValidationError):
        PolicyInput(intent=view, i_context=(execution,))
    with pytest.raises(ValidationError):  # no smuggling through extra fields
        PolicyInput(
            intent=view,
            i_context=({**GovernanceItem.from_event(intent).model_dump(), "output_text": "secret output"},),
        )
    with pytest.raises(ValidationError):
        PolicyInput(intent=view, i_context=(), o_context=("secret output",))
    with pytest.raises(ValueError):
        IntentView.from_intent(execution)


class SpyPolicy:
    policy_id = "test.spy"
    policy_version = "1"

    def __init__(self) -> None:
        self.seen: list[PolicyInput] = []

    def config(self) -> dict:
        return {}

    def evaluate(self, policy_input: PolicyInput) -> PolicyDecision:
        self.seen.append(policy_input)
        return PolicyDecision.allow("test.ok")


def spy_loaded() -> tuple[SpyPolicy, LoadedPolicy]:
    spy = SpyPolicy()
    return spy, LoadedPolicy(spy, "test.spy", "1", "sha256:" + "0" * 64, None, "POLICY")


def test_seed_example_1_policy_sees_only_the_intent(new_chain):
    chain = new_chain()
    i1, _, x1 = chain.turn("T", "1", "What is 2+2?", "2+2 equals 4")
    i2 = chain.intent("T", "2", "Explain more", parent="1", refs=[ev("1"), ev("1", "execution")])
    spy, loaded = spy_loaded()
    outcome = decide(i2, chain.candidates_for(i2), CFG, loaded)
    assert outcome.allowed
    (seen,) = spy.seen
    assert [item.event_digest for item in seen.i_context] == [i1.digest]
    assert seen.intent.message == "Explain more"
    assert "2+2 equals 4" not in seen.model_dump_json()
    assert x1.digest not in seen.model_dump_json()


# --------------------------------------------------------------------------- loading


def test_none_loads_the_observer_policy(new_chain):
    loaded = load_policy(None)
    assert loaded.policy_id == OBSERVER_POLICY_ID
    assert load_policy("  ") is loaded
    chain = new_chain()
    intent = chain.intent("T", "1", "hello")
    outcome = decide(intent, [], CFG, loaded)
    assert outcome.payload["decision"] == "DENY"
    assert outcome.payload["reason_codes"] == ["gateway.observer_mode"]


@pytest.mark.parametrize(
    ("module", "obj", "policy_id"),
    [
        ("turngate.policies.allow_all", "POLICY", "turngate.allow_all"),
        ("turngate.policies.deny_all", "POLICY", "turngate.deny_all"),
        ("turngate.policies.max_user_messages", "POLICY", "turngate.max_user_messages"),
        ("turngate.policies.allow_all:policy", "IGNORED", "turngate.allow_all"),
        (
            "turngate.policies.deny_all",
            "DenyAllPolicy",
            "turngate.deny_all",
        ),  # a class: instantiated
        ("dbl_policy.allow_all", "policy", "turngate.allow_all"),  # DBL_GATEWAY_POLICY_MODULE style
        ("dbl_policy.deny_all", "POLICY", "turngate.deny_all"),
    ],
)
def test_builtin_and_dbl_style_names_load(module, obj, policy_id):
    loaded = load_policy(module, obj)
    assert loaded.policy_id == policy_id
    assert loaded.policy_version == "1"
    assert loaded.config_digest.startswith("sha256:")
    assert load_policy(module, obj) is loaded  # cached per (module, object)


def install(monkeypatch, name: str, **attrs) -> None:
    module = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)


class NoEvaluate:
    policy_id = "x"
    policy_version = "1"

    def config(self) -> dict:
        return {}


class BadConfig(SpyPolicy):
    def config(self) -> dict:
        return {"ratio": float("nan")}


class NoVersion(SpyPolicy):
    policy_version = ""


@pytest.mark.parametrize(
    ("module", "obj", "attrs", "needle"),
    [
        ("turngate_no_such_policy_module", "POLICY", None, "not found"),
        ("tg_test_policy_missing", "POLICY", {}, "has no object 'POLICY'"),
        ("tg_test_policy_shape", "POLICY", {"POLICY": NoEvaluate()}, "no callable evaluate()"),
        ("tg_test_policy_string", "POLICY", {"POLICY": "allow"}, "not a policy"),
        ("tg_test_policy_config", "POLICY", {"POLICY": BadConfig()}, "not canonical JSON"),
        ("tg_test_policy_version", "POLICY", {"POLICY": NoVersion()}, "policy_version"),
        ("tg_test_policy_factory", "make", {"make": lambda: 1 / 0}, "ZeroDivisionError"),
        (":POLICY", "POLICY", None, "empty"),
    ],
)
def test_bad_policies_raise_policy_load_error(monkeypatch, module, obj, attrs, needle):
    if attrs is not None:
        install(monkeypatch, module, **attrs)
    with pytest.raises(PolicyLoadError) as err:
        load_policy(module, obj)
    assert needle in str(err.value)


def test_a_module_that_fails_to_import_is_a_policy_load_error(monkeypatch, tmp_path):
    (tmp_path / "tg_broken_policy.py").write_text("raise RuntimeError('boom')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PolicyLoadError, match="RuntimeError: boom"):
        load_policy("tg_broken_policy")


# --------------------------------------------------------------------------- max_user_messages


def test_seed_example_2_max_user_messages(new_chain):
    loaded = load_policy("turngate.policies.max_user_messages")
    assert loaded.policy.config() == {"max_user_messages": 5}
    chain = new_chain()
    for n in range(1, 6):
        chain.turn(
            "T",
            str(n),
            f"message {n}",
            parent=str(n - 1) if n > 1 else None,
            refs=[ev(str(k)) for k in range(1, n)],
        )
    sixth = chain.intent("T", "6", "message 6", parent="5", refs=[ev(str(k)) for k in range(1, 6)])
    outcome = decide(sixth, chain.candidates_for(sixth), CFG, loaded)
    assert len(outcome.payload["resolved_refs"]) == 5
    assert all(r["admitted_for"] == "governance" for r in outcome.payload["resolved_refs"])
    assert outcome.payload["decision"] == "DENY"
    assert outcome.payload["reason_codes"] == ["policy.max_user_messages_exceeded"]

    fifth_like = chain.intent("T", "6b", "again", parent="5", refs=[ev(str(k)) for k in range(1, 5)])
    ok = decide(fifth_like, chain.candidates_for(fifth_like), CFG, loaded)
    assert ok.payload["decision"] == "ALLOW"
    assert ok.payload["reason_codes"] == ["policy.max_user_messages_within_limit"]


def test_max_user_messages_limit_comes_from_env_at_import_and_is_in_the_config_digest(monkeypatch):
    name = "turngate.policies.max_user_messages"
    default_digest = load_policy(name).config_digest
    monkeypatch.setenv("TURNGATE_POLICY_MAX_USER_MESSAGES", "2")
    monkeypatch.delitem(sys.modules, name)
    clear_policy_cache()
    loaded = load_policy(name)
    assert loaded.policy.config() == {"max_user_messages": 2}
    assert loaded.config_digest != default_digest

    monkeypatch.setenv("TURNGATE_POLICY_MAX_USER_MESSAGES", "zero")
    monkeypatch.delitem(sys.modules, name)
    clear_policy_cache()
    with pytest.raises(PolicyLoadError, match="TURNGATE_POLICY_MAX_USER_MESSAGES"):
        load_policy(name)


def test_max_user_messages_module_restored_after_env_test():
    module = importlib.import_module("turngate.policies.max_user_messages")
    assert module.POLICY.limit == 5
