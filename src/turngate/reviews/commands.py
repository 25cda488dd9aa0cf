"""`turngate reviews list | show | approve | deny`: decide turns a policy sent to human review.

Talks to the API (``/reviews``, docs/REVIEWS.md) with a key that holds the ``review`` role.
Exit codes: 0 success; 1 the API refused (its reason_code is printed: ``review.four_eyes``,
``review.already_decided``, ``review.not_found``, ...); 2 the API cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from turngate.client import AsyncTurngate, TurngateError, Unreachable

Command = Callable[[AsyncTurngate, argparse.Namespace], Awaitable[int]]


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


def _error(exc: TurngateError | Unreachable, as_json: bool) -> int:
    if isinstance(exc, Unreachable):
        print(f"error: {exc} (is turngate running? see --url, TURNGATE_URL)", file=sys.stderr)
        return 2
    if as_json:
        _print_json(exc.as_dict())
    hint = "\nset --api-key or TURNGATE_API_KEY (a key with the review role)" if exc.status == 401 else ""
    print(f"error: {exc.reason_code} (HTTP {exc.status}): {exc.detail}{hint}", file=sys.stderr)
    return 1


def _with_client(body: Command) -> Callable[[argparse.Namespace], Awaitable[int]]:
    async def command(args: argparse.Namespace) -> int:
        try:
            async with AsyncTurngate(args.url, args.api_key) as api:
                return await body(api, args)
        except (TurngateError, Unreachable) as exc:
            return _error(exc, args.json)

    return command


def _age(seconds: Any) -> str:
    return str(timedelta(seconds=int(seconds))) if isinstance(seconds, int | float) else "?"


def review_lines(review: dict[str, Any]) -> list[str]:
    """One review, for a person: the turn, what the policy asked and the message."""
    request = review.get("request") or {}
    lines = [
        f"turn      {review.get('correlation_id')} "
        f"(thread {review.get('thread_id')}, actor {review.get('actor')})",
        f"state     {review.get('state')}",
    ]
    if review.get("state") == "decided":
        block = review.get("review") or {}
        approver = (block.get("approver") or {}).get("key_id")
        lines.append(f"decision  {review.get('decision')} {review.get('reason_codes')}")
        lines.append(f"verdict   {block.get('verdict')} by {approver or '-'}")
        request = block.get("request") or {}
    else:
        lines.append(f"waiting   {_age(review.get('age_s'))}, deadline {review.get('deadline_at')}")
        lines.append(f"model     {review.get('provider')}/{review.get('model')}")
        lines.append(f"refs      {len(review.get('resolved_refs') or [])} resolved")
    lines.append(
        f"asks      {', '.join(request.get('reason_codes') or [])}: role {request.get('role')!r}"
        f"{', four-eyes' if request.get('four_eyes') else ''}"
        + (f" (over budget #{request['budget_id']})" if request.get("budget_id") is not None else "")
    )
    lines.append(f"message   {review.get('message')}")
    return lines


@_with_client
async def cmd_list(api: AsyncTurngate, args: argparse.Namespace) -> int:
    reviews = await api.reviews()
    if args.json:
        _print_json({"reviews": reviews})
        return 0
    if not reviews:
        print("no turn is waiting for review")
        return 0
    print(f"{'TURN':<28} {'WAITING':>9}  {'DEADLINE':<26} {'REASONS'}")
    for review in reviews:
        codes = ",".join((review.get("request") or {}).get("reason_codes") or [])
        age, deadline = _age(review.get("age_s")), str(review.get("deadline_at"))
        print(f"{review['correlation_id']:<28} {age:>9}  {deadline:<26} {codes}")
    return 0


@_with_client
async def cmd_show(api: AsyncTurngate, args: argparse.Namespace) -> int:
    review = await api.review(args.turn)
    _print_json(review) if args.json else print("\n".join(review_lines(review)))
    return 0


@_with_client
async def cmd_decide(api: AsyncTurngate, args: argparse.Namespace) -> int:
    decide = api.approve if args.verdict == "approve" else api.deny
    answer = await decide(args.turn, comment=args.comment)
    if args.json:
        _print_json(answer)
    else:
        print(f"{args.verdict}d: turn {answer.get('correlation_id')} (its DECISION is recorded next)")
    return 0


def add_reviews_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers `turngate reviews ...` on the top-level subparsers."""
    reviews = sub.add_parser("reviews", help="list, show, approve and deny turns waiting for review")
    actions = reviews.add_subparsers(dest="reviews_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="the turns of your tenant waiting for a verdict, oldest first")
    listing.set_defaults(run=cmd_list)
    show = actions.add_parser("show", help="one turn's review: what it waits for, or its verdict")
    show.set_defaults(run=cmd_show)
    approve = actions.add_parser("approve", help="approve a turn: recorded ALLOW, it goes on to its model")
    approve.set_defaults(run=cmd_decide, verdict="approve")
    deny = actions.add_parser("deny", help="deny a turn: recorded DENY review.denied")
    deny.set_defaults(run=cmd_decide, verdict="deny")
    for parser in (approve, deny):
        parser.add_argument("--comment", help="why (stored as an artifact; its digest is in the DECISION)")
    for parser in (show, approve, deny):
        parser.add_argument("turn", metavar="TURN", help="the turn's correlation id (from `reviews list`)")
    for parser in (listing, show, approve, deny):
        parser.add_argument("--url", help="turngate API (default: TURNGATE_URL or http://127.0.0.1:8010)")
        parser.add_argument("--api-key", help="a key with the review role (default: TURNGATE_API_KEY)")
        parser.add_argument("--json", action="store_true", help="machine-readable output (JSON on stdout)")
