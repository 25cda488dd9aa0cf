"""The what-if runner's own limits, at and around each boundary."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import turngate.audit.forked_ranges as forked_ranges
import turngate.policy_lifecycle.whatif as whatif
from tests.policy_lifecycle.conftest import REPO
from turngate.core.policy import load_policy
from turngate.ledger import LedgerStore


@pytest.fixture
def store(tmp_path):
    ledger = LedgerStore(f"sqlite:///{tmp_path / 'ledger.sqlite3'}")
    yield ledger
    ledger.close()


@pytest.mark.parametrize(
    ("in_scope", "processes"),
    [
        (whatif.PARALLEL_MIN_DECISIONS - 1, 1),
        (whatif.PARALLEL_MIN_DECISIONS, 2),
        (whatif.PARALLEL_MIN_DECISIONS + 1, 2),
    ],
)
def test_processes_start_at_the_parallel_threshold(store, monkeypatch, in_scope, processes) -> None:
    monkeypatch.setattr(forked_ranges, "usable_cores", lambda: 2)
    monkeypatch.setattr(forked_ranges, "can_fork", lambda: True)
    assert whatif._process_count(store, in_scope, None) == processes
    assert whatif._process_count(store, in_scope, 1) == 1
    assert whatif._process_count(store, 3, 8) == 3  # never more processes than DECISIONs


@pytest.mark.parametrize(
    "count",
    [whatif.LISTED_UNREPRODUCIBLE - 1, whatif.LISTED_UNREPRODUCIBLE, whatif.LISTED_UNREPRODUCIBLE + 1],
)
def test_unreproducible_turns_are_all_counted_and_listed_up_to_the_limit(count) -> None:
    first, second = whatif._Part(), whatif._Part()
    for number in range(count):
        (first if number % 2 else second).note_unreproducible(f"c-{number}")
    report = whatif._merge(load_policy("turngate.policies.allow_all"), whatif.WhatIfQuery(), [first, second])
    assert report.unreproducible == count
    assert len(report.unreproducible_ids) == min(count, whatif.LISTED_UNREPRODUCIBLE)


def test_batch_size_must_be_positive(store) -> None:
    from turngate.core.context import load_context_config

    policy, cfg = load_policy("turngate.policies.allow_all"), load_context_config(None, {})
    with pytest.raises(ValueError, match="batch_size"):
        whatif.run_whatif(store, policy, context_config=cfg, batch_size=0)
    assert whatif.run_whatif(store, policy, context_config=cfg, batch_size=1).checked == 0  # empty ledger


def test_processes_split_balance_and_survive_a_crash() -> None:
    # In a fresh process: forking is only safe from a single-threaded one, and this pytest
    # process may have started threads by now.
    done = subprocess.run(
        [sys.executable, "-m", "tests.policy_lifecycle.forked_whatif"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("ok")
