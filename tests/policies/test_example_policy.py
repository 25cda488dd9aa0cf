"""The example policy of docs/POLICIES.md (examples/policies/blocked_terms.py), tested the way
the guide says to test one's own: ``evaluate`` on a hand-built ``PolicyInput``, then loaded by
module path into a real stack, then replayed from the ledger."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stack import make_settings, running_stack
from turngate.audit.replay import replay_turn
from turngate.core.context import load_context_config
from turngate.core.policy import GovernanceItem, IntentView, PolicyInput, clear_policy_cache, load_policy
from turngate.ledger import LedgerStore

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "policies"


@pytest.fixture
def on_path() -> Iterator[None]:
    sys.path.insert(0, str(EXAMPLES))
    clear_policy_cache()
    try:
        yield
    finally:
        sys.path.remove(str(EXAMPLES))
        sys.modules.pop("blocked_terms", None)
        clear_policy_cache()


def policy_input(message: str, *, client: list[str] = (), earlier: list[str] = ()) -> PolicyInput:
    inputs = {
        "client_context": {
            "messages": [{"role": "user", "content": t, "source": "unmatched_history"} for t in client]
        }
    }
    intent = IntentView(
        intent_type="chat.message",
        thread_id="t",
        turn_id="c",
        parent_turn_id=None,
        actor="user",
        lane="user_chat",
        stream_id="default",
        message=message,
        inputs=inputs,
        declared_tools=(),
        requested_model_id=None,
    )
    items = tuple(
        GovernanceItem(
            event_index=i,
            event_digest=f"sha256:{i:064x}",
            actor="user",
            intent_type="chat.message",
            message=text,
        )
        for i, text in enumerate(earlier)
    )
    return PolicyInput(intent=intent, i_context=items)


def test_evaluate_reads_the_message_client_context_and_declared_history(on_path: None) -> None:
    from blocked_terms import BlockedTermsPolicy, terms_from_env

    policy = BlockedTermsPolicy(terms_from_env("Slaptažodis, api key"))
    assert policy.config() == {"blocked_terms": ["api key", "slaptažodis"]}
    assert policy.evaluate(policy_input("hello")).reason_codes == ("example.no_blocked_term",)
    # case-folded, multibyte
    assert policy.evaluate(policy_input("Koks mano SLAPTAŽODIS?")).decision == "DENY"
    assert policy.evaluate(policy_input("hi", client=["my API KEY is ..."])).decision == "DENY"
    assert policy.evaluate(policy_input("hi", earlier=["the api key"])).decision == "DENY"
    # one character short of a term is not the term
    assert policy.evaluate(policy_input("api ke")).decision == "ALLOW"
    assert terms_from_env(None) == ("password", "api key") and terms_from_env(" , ") == ()


async def test_loaded_by_module_path_into_a_real_stack_and_replayed(
    on_path: None, tmp_path, temporal_server
) -> None:
    loaded = load_policy("blocked_terms")
    assert loaded.policy_id == "example.blocked_terms"
    settings = make_settings(tmp_path, temporal_server.address, policy_module="blocked_terms")
    async with running_stack(settings) as stack:
        denied = (await stack.chat("what is my password?", correlation_id="c-pw")).json()
        allowed = (await stack.chat("what is the weather?", correlation_id="c-ok")).json()
    assert denied["decision"]["payload"]["reason_codes"] == ["example.blocked_term"]
    assert denied["decision"]["payload"]["policy_id"] == "example.blocked_terms"
    assert "execution" not in denied
    assert allowed["execution"]["payload"]["output_text"] == "echo: what is the weather?"
    with LedgerStore(settings.effective_ledger_url) as store:
        for cid in ("c-pw", "c-ok"):
            replay = replay_turn(
                store, cid, context_config=load_context_config(None, {}), policy_module="blocked_terms"
            )
            assert replay.ok, replay
