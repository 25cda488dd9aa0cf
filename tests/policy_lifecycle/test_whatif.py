"""`turngate policy whatif` over a ledger recorded by real turns (see conftest.py)."""

from __future__ import annotations

import io
import json

import pytest

from tests.policy_lifecycle.conftest import run_turngate
from turngate.core.context import load_context_config
from turngate.core.policy import clear_policy_cache, load_policy
from turngate.ledger import LedgerStore
from turngate.policy_lifecycle.commands import whatif_command
from turngate.policy_lifecycle.whatif import WhatIfQuery, run_whatif
from turngate.settings import Settings

MAX_USER = "turngate.policies.max_user_messages"


def whatif(settings: Settings, *args: str, **env: str) -> tuple[int, dict]:
    done = run_turngate(
        "policy", "whatif", "--json", "--ledger-url", settings.effective_ledger_url, *args, **env
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def by_change(report: dict, change: str) -> list[str]:
    return [flip["correlation_id"] for flip in report["flipped"] if flip["change"] == change]


async def test_max_user_messages_flips_exactly_the_turns_over_the_limit(thread_ledger) -> None:
    # Turn c-k declares k earlier messages: with the default limit 5 it holds k + 1 messages.
    code, report = whatif(thread_ledger, "--module", MAX_USER)
    assert code == 1
    assert report["checked"] == 7
    assert by_change(report, "ALLOW -> DENY") == ["c-5", "c-6"]
    flip = next(f for f in report["flipped"] if f["correlation_id"] == "c-6")
    assert flip["thread_id"] == "t"
    assert flip["recorded"] == {"decision": "ALLOW", "reason_codes": ["policy.allow_all"]}
    assert flip["candidate"] == {"decision": "DENY", "reason_codes": ["policy.max_user_messages_exceeded"]}
    # The other turns stay ALLOWed, for another reason: reported as such.
    assert by_change(report, "reasons") == ["c-0", "c-1", "c-2", "c-3", "c-4"]
    assert by_change(report, "DENY -> ALLOW") == []
    assert report["by_reason"] == {
        "policy.max_user_messages_exceeded": 2,
        "policy.max_user_messages_within_limit": 5,
    }
    assert report["errors"] == [] and report["unreproducible"] == 0


@pytest.mark.parametrize(("limit", "denied"), [("5", ["c-5", "c-6"]), ("6", ["c-6"]), ("7", [])])
async def test_the_limit_at_and_around_the_longest_turn(thread_ledger, limit, denied) -> None:
    # c-6 carries 7 user messages: a limit of 6 denies it alone, 7 denies nothing.
    code, report = whatif(thread_ledger, "--module", MAX_USER, TURNGATE_POLICY_MAX_USER_MESSAGES=limit)
    assert code == 1  # the reason codes change on every turn
    assert by_change(report, "ALLOW -> DENY") == denied


async def test_the_recorded_policy_changes_nothing_and_exits_0(thread_ledger) -> None:
    done = run_turngate(
        "policy",
        "whatif",
        "--module",
        "turngate.policies.allow_all",
        "--ledger-url",
        thread_ledger.effective_ledger_url,
    )
    assert done.returncode == 0, done.stderr
    assert "7 turn(s) checked, 0 would change" in done.stdout


async def test_a_raising_candidate_is_reported_per_intent(thread_ledger) -> None:
    code, report = whatif(thread_ledger, "--module", "tests.policy_lifecycle.raising_policy")
    assert code == 1
    assert report["checked"] == 7
    assert [(e["correlation_id"], e["code"]) for e in report["errors"]] == [("c-3", "policy.error")]
    assert "ValueError: cannot decide turn c-3" in report["errors"][0]["detail"]
    # What the turn would have recorded: a DENY for the policy's failure; the run went on.
    assert [f["correlation_id"] for f in report["flipped"]] == ["c-3"]
    assert report["flipped"][0]["candidate"] == {
        "decision": "DENY",
        "reason_codes": ["policy.evaluation_error"],
    }
    assert report["flipped"][0]["error"]["code"] == "policy.error"


async def test_filters_select_turns(thread_ledger) -> None:
    code, report = whatif(thread_ledger, "--module", MAX_USER, "--thread", "elsewhere")
    assert (code, report["checked"], report["flipped"]) == (0, 0, [])
    code, report = whatif(thread_ledger, "--module", MAX_USER, "--since", "2999-01-01")
    assert (code, report["checked"]) == (0, 0)
    code, report = whatif(thread_ledger, "--module", MAX_USER, "--until", "2999-01-01T00:00:00Z")
    assert report["checked"] == 7
    code, report = whatif(thread_ledger, "--module", MAX_USER, "--tenant", "nobody")
    assert report["checked"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--module", "no.such.module"], "not found"),
        (["--module", MAX_USER, "--object", "NOPE"], "has no object 'NOPE'"),
        (["--module", MAX_USER, "--since", "yesterday"], "not an ISO-8601"),
        (["--module", MAX_USER, "--since", "2030-01-02", "--until", "2030-01-01"], "after --until"),
        ([], "--module"),
    ],
)
async def test_bad_arguments_exit_2(thread_ledger, args, message) -> None:
    done = run_turngate("policy", "whatif", "--ledger-url", thread_ledger.effective_ledger_url, *args)
    assert done.returncode == 2
    assert message in done.stderr


async def test_parallel_processes_give_the_same_report(thread_ledger) -> None:
    store = LedgerStore(thread_ledger.effective_ledger_url)
    clear_policy_cache()
    try:
        policy = load_policy(MAX_USER)
        cfg = load_context_config(None, {})
        one = run_whatif(store, policy, context_config=cfg, workers=1, batch_size=2)
        two = run_whatif(store, policy, context_config=cfg, workers=3, batch_size=1)
    finally:
        store.close()
    assert one.model_dump(exclude={"duration_ms"}) == two.model_dump(exclude={"duration_ms"})
    assert one.checked == 7


async def test_a_decision_under_an_unknown_config_is_not_checked(thread_ledger) -> None:
    other_config = thread_ledger.model_copy(update={"context_max_refs": "3"})  # another config digest
    out, err = io.StringIO(), io.StringIO()
    code = whatif_command(
        other_config,
        module=MAX_USER,
        object_name=None,
        query=WhatIfQuery(),
        as_json=False,
        out=out,
        err=err,
    )
    assert code == 0, err.getvalue()
    assert "0 turn(s) checked" in out.getvalue()
    assert "7 turn(s) were decided under another context config" in out.getvalue()
