"""A worker refuses a policy whose id+version the ledger recorded with another config digest."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest

from tests.policy_lifecycle.conftest import run_turngate
from turngate.core.policy import load_policy
from turngate.ledger import LedgerStore
from turngate.policy_lifecycle.history import PolicyVersionConflictError, version_conflict
from turngate.worker.run import running_worker

CHANGED = "tests.policy_lifecycle.changed_allow_all"


async def test_worker_refuses_a_changed_policy_under_a_recorded_version(thread_ledger) -> None:
    settings = thread_ledger.model_copy(update={"policy_module": CHANGED})
    with pytest.raises(PolicyVersionConflictError, match="must change its version"):
        async with running_worker(settings):
            pass


async def test_the_worker_command_exits_with_the_reason(thread_ledger) -> None:
    done = run_turngate(
        "worker",
        TURNGATE_POLICY_MODULE=CHANGED,
        TURNGATE_LEDGER_URL=thread_ledger.effective_ledger_url,
        TEMPORAL_ADDRESS=thread_ledger.temporal_address,
        TURNGATE_DATA_DIR=str(thread_ledger.data_dir),
    )
    assert done.returncode == 1
    assert "turngate.allow_all" in done.stderr and "TURNGATE_POLICY_VERSION_CHECK=warn" in done.stderr


async def test_warn_lets_the_worker_start(thread_ledger, caplog) -> None:
    settings = thread_ledger.model_copy(update={"policy_module": CHANGED, "policy_version_check": "warn"})
    with caplog.at_level(logging.WARNING):
        async with running_worker(settings):
            pass
    assert "must change its version" in caplog.text


async def test_the_same_policy_or_a_new_version_starts(thread_ledger) -> None:
    store = LedgerStore(thread_ledger.effective_ledger_url)
    try:
        assert version_conflict(store, load_policy("turngate.policies.allow_all")) is None
        assert version_conflict(store, load_policy("turngate.policies.deny_all")) is None
        clash = version_conflict(store, load_policy(CHANGED))
    finally:
        store.close()
    assert clash is not None and clash.policy_id == "turngate.allow_all" and clash.first_index == 1


async def test_a_changed_policy_under_a_new_version_starts(thread_ledger) -> None:
    store = LedgerStore(thread_ledger.effective_ledger_url)
    try:
        renamed = dataclasses.replace(load_policy(CHANGED), policy_version="2")
        assert version_conflict(store, renamed) is None
    finally:
        store.close()


async def test_history_lists_the_recorded_policy_with_its_counts(thread_ledger) -> None:
    done = run_turngate("policy", "history", "--json", "--ledger-url", thread_ledger.effective_ledger_url)
    assert done.returncode == 0, done.stderr
    history = json.loads(done.stdout)
    assert history["decisions"] == 7
    [version] = history["versions"]
    allow_all = load_policy("turngate.policies.allow_all")
    assert (version["role"], version["policy_id"], version["policy_version"]) == (
        "active",
        "turngate.allow_all",
        "1",
    )
    assert version["config_digest"] == allow_all.config_digest
    assert version["reasons"] == {"ALLOW": {"policy.allow_all": 7}}
    assert version["first_at"] <= version["last_at"]
    text = run_turngate("policy", "history", "--ledger-url", thread_ledger.effective_ledger_url)
    assert "ACTIVE turngate.allow_all v1" in text.stdout


async def test_a_shadow_policy_is_guarded_too(thread_ledger) -> None:
    settings = thread_ledger.model_copy(update={"shadow_policy_module": CHANGED})
    with pytest.raises(PolicyVersionConflictError, match=r"turngate\.allow_all"):
        async with running_worker(settings):
            pass
