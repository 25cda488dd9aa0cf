"""`turngate budgets set | show` as a user runs it (a real process on a real ledger file), and
the budget table's append-only guarantee."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DatabaseError

from turngate.cli import build_parser
from turngate.ledger import LedgerStore
from turngate.ledger.budgets import BudgetStore


def budgets(ledger: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turngate", "budgets", *args, "--ledger-url", ledger],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def ledger(tmp_path: Path) -> str:
    return f"sqlite:///{(tmp_path / 'ledger.sqlite3').as_posix()}"


def test_set_then_show_lists_the_budget_in_effect_with_its_spend(ledger: str) -> None:
    assert budgets(ledger, "set", "--tenant", "acme", "--max-tokens", "100").returncode == 0
    second = budgets(ledger, "set", "--tenant", "acme", "--max-tokens", "200", "--max-cost", "1.5", "--json")
    assert second.returncode == 0, second.stderr
    record = json.loads(second.stdout)
    assert record["budget_id"] == 2 and record["max_cost_micros"] == 1_500_000
    shown = json.loads(budgets(ledger, "show", "--json").stdout)
    [entry] = shown["budgets"]  # the latest record of the scope is in effect
    assert entry["budget"]["budget_id"] == 2 and entry["spent"] == {"tokens": 0, "cost_micros": 0}
    assert entry["remaining"] == {"tokens": 200, "cost_micros": 1_500_000} and entry["max_cost"] == "1.5"
    text_view = budgets(ledger, "show").stdout
    assert "#2  acme  day" in text_view and "tokens 0/200 (left 200)" in text_view
    history = json.loads(budgets(ledger, "show", "--history", "--json").stdout)
    assert [r["budget_id"] for r in history] == [1, 2]
    assert budgets(ledger, "set", "--tenant", "acme", "--clear").returncode == 0
    assert budgets(ledger, "show").stdout.strip() == "no budgets"


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--tenant", "acme"], "budget.no_limit"),
        (["--tenant", "acme", "--clear", "--max-tokens", "1"], "budget.invalid_limit"),
        (["--tenant", "acme", "--max-tokens", "-1"], "budget.invalid_limit"),
        (["--tenant", "acme", "--max-cost", "abc"], "budget.invalid_cost"),
        (["--tenant", "acme", "--max-cost", "0.0000001"], "budget.invalid_cost"),
        (["--tenant", " ", "--max-tokens", "1"], "budget.invalid_scope"),
        (["--tenant", "acme", "--period", "window", "--max-tokens", "1"], "budget.invalid_window"),
        (
            [
                "--tenant",
                "a",
                "--period",
                "window",
                "--from",
                "2026-12-02",
                "--until",
                "2026-12-01",
                "--max-tokens",
                "1",
            ],
            "budget.invalid_window",
        ),
        (["--tenant", "acme", "--from", "2026-12-01", "--max-tokens", "1"], "budget.invalid_window"),
        (["--tenant", "acme", "--max-tokens", "1", "--review-role", "finance"], "budget.invalid_review"),
        (["--tenant", "acme", "--max-tokens", "1", "--four-eyes"], "budget.invalid_review"),
        (["--tenant", "acme", "--clear", "--on-exceed", "review"], "budget.invalid_review"),
        (["--tenant", "acme", "--on-exceed", "review"], "budget.no_limit"),
        (
            ["--tenant", "acme", "--max-tokens", "1", "--on-exceed", "review", "--review-deadline-s", "0"],
            "budget.invalid_review",
        ),
        (
            [
                "--tenant",
                "acme",
                "--max-tokens",
                "1",
                "--on-exceed",
                "review",
                "--review-deadline-s",
                "2592001",
            ],
            "budget.invalid_review",
        ),
        (
            ["--tenant", "acme", "--max-tokens", "1", "--on-exceed", "review", "--review-role", "finance"],
            "budget.invalid_review",
        ),
    ],
)
def test_bad_input_exits_2_with_its_code(ledger: str, args: list[str], code: str, capsys) -> None:
    # In process (the same parser and command as the console script; a process per case is slow).
    parsed = build_parser().parse_args(["budgets", "set", *args, "--ledger-url", ledger])
    assert asyncio.run(parsed.run(parsed)) == 2
    assert code in capsys.readouterr().err


def test_budget_records_are_append_only(ledger: str) -> None:
    with LedgerStore(ledger) as store:
        BudgetStore(store).set("acme", max_tokens=5)
        for statement in ("UPDATE budgets SET max_tokens = 500", "DELETE FROM budgets"):
            with pytest.raises(DatabaseError, match="append-only"), store.engine.begin() as conn:
                conn.execute(text(statement))
        assert [r.max_tokens for r in BudgetStore(store).history()] == [5]


def test_a_budget_that_sends_turns_over_it_to_review(ledger: str) -> None:
    made = budgets(
        ledger,
        *("set", "--tenant", "acme", "--max-tokens", "100", "--on-exceed", "review"),
        *("--review-role", "admin", "--review-deadline-s", "2592000", "--four-eyes"),
    )
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == "budget #1 set for acme; over it a turn goes to review (admin)"
    [entry] = json.loads(budgets(ledger, "show", "--json").stdout)["budgets"]
    assert entry["budget"]["on_exceed"] == "review"
    assert entry["budget"]["review"] == {"role": "admin", "deadline_s": 2592000, "four_eyes": True}
    assert "over it: review by admin, four-eyes" in budgets(ledger, "show").stdout
    default = budgets(ledger, "set", "--tenant", "b", "--max-tokens", "1", "--on-exceed", "review", "--json")
    assert json.loads(default.stdout)["review"] == {"role": "review", "deadline_s": 86400, "four_eyes": False}
    plain = json.loads(budgets(ledger, "set", "--tenant", "c", "--max-tokens", "1", "--json").stdout)
    assert "on_exceed" not in plain and "review" not in plain
