"""`turngate budgets set | show`: budgets in the ledger database (docs/BUDGETS.md)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pydantic import ValidationError

from turngate.core.model_aliases import (
    SpendError,
)
from turngate.core.review import ReviewSpec
from turngate.ledger import LedgerStore
from turngate.ledger.budgets import BudgetStore, parse_cost
from turngate.security.principal import ROLE_ADMIN, ROLE_REVIEW
from turngate.settings import load_settings
from turngate.spend.status import budget_status

#: The API key roles that may decide a review.
REVIEW_ROLES = (ROLE_REVIEW, ROLE_ADMIN)


def _open(args: argparse.Namespace) -> LedgerStore:
    return LedgerStore(args.ledger_url or load_settings().effective_ledger_url)


def _limit(value: int | None, unit: str = "") -> str:
    return "-" if value is None else f"{value}{unit}"


def _line(entry: dict[str, Any]) -> str:
    budget = entry["budget"]
    scope = budget["tenant_id"] + (f"/{budget['key_id']}" if budget["key_id"] else "")
    spent, remaining = entry["spent"], entry["remaining"]
    return (
        f"#{budget['budget_id']}  {scope}  {budget['period']} "
        f"[{entry['window_start']} .. {entry['window_end']})  "
        f"tokens {spent['tokens']}/{_limit(budget['max_tokens'])} (left {_limit(remaining['tokens'])})  "
        f"cost {entry['spent_cost']}/{entry['max_cost'] or '-'} (left {entry['remaining_cost'] or '-'})"
        + _over(budget.get("review"))
    )


def _over(review: dict[str, Any] | None) -> str:
    """What a turn over the budget gets, when it is not a DENY."""
    if review is None:
        return ""
    return f"  over it: review by {review['role']}" + (", four-eyes" if review["four_eyes"] else "")


async def cmd_budgets_set(args: argparse.Namespace) -> int:
    try:
        max_cost = parse_cost(args.max_cost)
        if args.max_tokens is None and max_cost is None and not args.clear:
            raise SpendError("budget.no_limit", "give --max-tokens and/or --max-cost, or --clear")
        if args.clear and (args.max_tokens is not None or max_cost is not None):
            raise SpendError("budget.invalid_limit", "--clear takes no limits")
        review = _review_spec(args)
        with _open(args) as store:
            record = BudgetStore(store).set(
                args.tenant,
                key_id=args.key,
                period=args.period,
                max_tokens=args.max_tokens,
                max_cost_micros=max_cost,
                window_start=args.window_from,
                window_end=args.window_until,
                review=review,
            )
    except SpendError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(record.model_dump(mode="json"), indent=2))
    else:
        what = "cleared" if record.cleared else "set"
        scope = record.tenant_id + (f"/{record.key_id}" if record.key_id else "")
        then = f"; over it a turn goes to review ({record.review.role})" if record.review else ""
        print(f"budget #{record.budget_id} {what} for {scope}{then}")
    return 0


def _review_spec(args: argparse.Namespace) -> ReviewSpec | None:
    """The review a turn over the budget goes to (``--on-exceed review``), or None: DENY."""
    given = args.review_role is not None or args.review_deadline_s is not None or args.four_eyes
    if args.on_exceed != "review":
        if given:
            raise SpendError(
                "budget.invalid_review",
                "--review-role/--review-deadline-s/--four-eyes need --on-exceed review",
            )
        return None
    if args.clear:
        raise SpendError("budget.invalid_review", "--clear takes no review option")
    spec: dict[str, Any] = {"four_eyes": args.four_eyes}
    if args.review_role is not None:
        if args.review_role not in REVIEW_ROLES:  # a role no key can hold would time every turn out
            raise SpendError(
                "budget.invalid_review", f"--review-role must be one of {', '.join(REVIEW_ROLES)}"
            )
        spec["role"] = args.review_role
    if args.review_deadline_s is not None:
        spec["deadline_s"] = args.review_deadline_s
    try:
        return ReviewSpec.model_validate(spec)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = "--review-" + "-".join(str(part) for part in error["loc"]).replace("_", "-")
        raise SpendError("budget.invalid_review", f"{field}: {error['msg']}") from None


async def cmd_budgets_show(args: argparse.Namespace) -> int:
    with _open(args) as store:
        if args.history:
            records = [r.model_dump(mode="json") for r in BudgetStore(store).history(args.tenant)]
            print(
                json.dumps(records, indent=2) if args.json else "\n".join(map(str, records)) or "no budgets"
            )
            return 0
        status = budget_status(store, args.tenant)
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        print("\n".join(_line(entry) for entry in status["budgets"]) if status["budgets"] else "no budgets")
    return 0


def add_budgets_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    budgets = sub.add_parser("budgets", help="set and show token and cost budgets per tenant and API key")
    verbs = budgets.add_subparsers(dest="budgets_command", required=True, metavar="VERB")
    put = verbs.add_parser("set", help="record a budget (a new record; the latest of a scope is in effect)")
    put.add_argument("--tenant", required=True, help="the tenant the budget belongs to")
    put.add_argument("--key", default=None, help="an API key id: a budget of that key alone")
    put.add_argument(
        "--period",
        choices=["day", "month", "window"],
        default="day",
        help="UTC day or month, or a fixed window (--from, --until)",
    )
    put.add_argument("--from", dest="window_from", default=None, help="--period window: start (ISO-8601)")
    put.add_argument("--until", dest="window_until", default=None, help="--period window: end (ISO-8601)")
    put.add_argument("--max-tokens", type=int, default=None, help="input + output tokens per period")
    put.add_argument("--max-cost", default=None, help="cost per period, in the models file's price currency")
    put.add_argument("--clear", action="store_true", help="remove the scope's budget (recorded too)")
    put.add_argument(
        "--on-exceed",
        choices=["deny", "review"],
        default="deny",
        help="a turn that no candidate of fits: DENY it (default) or send it to human review",
    )
    put.add_argument(
        "--review-role",
        default=None,
        help="--on-exceed review: the key role that decides, review (default) or admin",
    )
    put.add_argument(
        "--review-deadline-s", type=int, default=None, help="--on-exceed review: seconds to wait (86400)"
    )
    put.add_argument(
        "--four-eyes", action="store_true", help="--on-exceed review: the intent's own caller may not decide"
    )
    put.add_argument("--json", action="store_true")
    put.set_defaults(run=cmd_budgets_set)
    show = verbs.add_parser("show", help="budgets in effect with spend and what is left this period")
    show.add_argument("--tenant", default=None)
    show.add_argument("--history", action="store_true", help="every record, oldest first")
    show.add_argument("--json", action="store_true")
    show.set_defaults(run=cmd_budgets_show)
    for parser in (put, show):
        parser.add_argument("--ledger-url", help="default: the configured ledger (TURNGATE_LEDGER_URL)")
