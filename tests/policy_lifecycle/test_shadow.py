"""A shadow policy on live traffic: recorded beside the decision, counted, verified, in history.

allow_all decides; max_user_messages (limit 5) shadows it over the 7-turn thread, so it
disagrees on the two turns that carry more than 5 user messages (c-5, c-6).
"""

from __future__ import annotations

import json
import re

from tests.policy_lifecycle.conftest import record_thread, run_turngate
from tests.stack import make_settings, running_stack
from turngate.core.policy import load_policy
from turngate.telemetry import default_metrics

SHADOW = "turngate.policies.max_user_messages"


def shadow_count(agreement: str) -> float:
    labels = {"policy_id": "turngate.max_user_messages", "policy_version": "1", "agreement": agreement}
    return default_metrics().registry.get_sample_value("turngate_shadow_decisions_total", labels) or 0.0


async def test_a_disagreeing_shadow_is_recorded_counted_verified_and_listed(
    tmp_path, temporal_server
) -> None:
    settings = make_settings(tmp_path, temporal_server.address, shadow_policy_module=SHADOW)
    before = shadow_count("agree"), shadow_count("disagree")
    decisions = await record_thread(settings)

    # Recorded under `shadow`; ALLOW/DENY and the reasons stay the active policy's.
    shadow = load_policy(SHADOW)
    assert [d["decision"] for d in decisions] == ["ALLOW"] * 7
    assert all(d["reason_codes"] == ["policy.allow_all"] for d in decisions)
    entries = [d["shadow"] for d in decisions]
    assert all(len(e) == 1 for e in entries)
    assert [e[0]["decision"] for e in entries] == ["ALLOW"] * 5 + ["DENY"] * 2
    assert entries[6][0] == {
        "policy_id": "turngate.max_user_messages",
        "policy_version": "1",
        "config_digest": shadow.config_digest,
        "decision": "DENY",
        "reason_codes": ["policy.max_user_messages_exceeded"],
    }

    # Counted by policy and agreement (the worker counts; /metrics shows it).
    assert (shadow_count("agree") - before[0], shadow_count("disagree") - before[1]) == (5, 2)
    async with running_stack(settings, worker=False) as stack:
        text = (await stack.http.get("/metrics")).text
    assert re.search(
        r'turngate_shadow_decisions_total\{agreement="disagree",policy_id="turngate\.max_user_messages"', text
    )

    # `turngate verify` recomputes every shadow entry (the shadow policy configured) and passes.
    ledger = ["--ledger-url", settings.effective_ledger_url]
    env = {"TURNGATE_ARTIFACTS": str(settings.effective_artifacts), "TURNGATE_SHADOW_POLICY_MODULE": SHADOW}
    done = run_turngate("verify", "--json", *ledger, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["checked_decisions"] == 7

    # History lists both: the policy that decided and the one that shadowed it.
    done = run_turngate("policy", "history", "--json", *ledger)
    versions = {(v["role"], v["policy_id"]): v for v in json.loads(done.stdout)["versions"]}
    assert set(versions) == {("active", "turngate.allow_all"), ("shadow", "turngate.max_user_messages")}
    assert versions["shadow", "turngate.max_user_messages"]["reasons"] == {
        "ALLOW": {"policy.max_user_messages_within_limit": 5},
        "DENY": {"policy.max_user_messages_exceeded": 2},
    }

    # What-if with the shadow policy names the same two turns.
    done = run_turngate("policy", "whatif", "--module", SHADOW, "--json", *ledger)
    flips = json.loads(done.stdout)["flipped"]
    assert [f["correlation_id"] for f in flips if f["change"] == "ALLOW -> DENY"] == ["c-5", "c-6"]
