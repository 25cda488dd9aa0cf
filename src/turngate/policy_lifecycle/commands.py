"""`turngate policy whatif | history`: the policy lifecycle from the command line.

Each command writes its report to ``out`` and diagnostics to ``err`` and returns the exit code:
``whatif`` 0 when nothing would change, 1 when some turn would be decided otherwise, 2 when it
could not run (bad arguments, a policy that does not load, an unreadable ledger).
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from typing import TYPE_CHECKING, TextIO

from turngate.policy_lifecycle.history import PolicyHistory, policy_history
from turngate.policy_lifecycle.whatif import WhatIfQuery, WhatIfReport, run_whatif, utc_moment
from turngate.settings import Settings, load_settings

if TYPE_CHECKING:
    from turngate.ledger import LedgerStore

EXIT_OK = 0
EXIT_CHANGED = 1
EXIT_ERROR = 2
#: Progress lines (on a terminal only) start after this many seconds and repeat this often.
PROGRESS_AFTER_S = 1.0
PROGRESS_EVERY_S = 1.0


def iso_moment(text: str) -> datetime:
    """An argparse type: an ISO-8601 date or time (UTC when it names no zone)."""
    try:
        return utc_moment(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 date or time in range: {text!r} ({exc})") from None


class TerminalProgress:
    """``progress(done, total)``: a line now and then on ``err``, only when it is a terminal."""

    def __init__(self, err: TextIO, label: str) -> None:
        self._err, self._label = err, label
        self._started = time.monotonic()
        self._next = self._started + PROGRESS_AFTER_S
        self._on = err.isatty()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self._on or now < self._next or total <= 0:
            return
        self._next = now + PROGRESS_EVERY_S
        self._err.write(
            f"\r{self._label}: {100 * done // total}% ({done}/{total}, {now - self._started:.0f} s)"
        )
        if done >= total:
            self._err.write("\n")
        self._err.flush()


def _open_ledger(url: str, err: TextIO, label: str) -> LedgerStore | None:
    """The ledger at ``url``, or None after saying on ``err`` why it cannot be opened."""
    from turngate.ledger import LedgerError, LedgerStore

    try:
        return LedgerStore(url)
    except LedgerError as exc:
        err.write(f"{label}: cannot open the ledger: {exc}\n")
        return None


def _verdict(decision: str, codes: list[str]) -> str:
    return f"{decision} [{', '.join(codes)}]"


def render_whatif_text(report: WhatIfReport) -> str:
    policy = report.policy
    changes = ", ".join(f"{name} {count}" for name, count in report.by_change.items()) or "none"
    lines = [
        f"policy whatif {policy['policy_id']} v{policy['policy_version']} ({policy['config_digest']}): "
        f"{report.checked} turn(s) checked, {len(report.flipped)} would change ({changes}), "
        f"{len(report.errors)} policy error(s), in {report.duration_ms / 1000:.1f} s"
    ]
    for flip in report.flipped:
        lines.append(
            f"FLIP {flip.change.value}: {flip.correlation_id} thread {flip.thread_id} index {flip.index}: "
            f"{_verdict(flip.recorded.decision, flip.recorded.reason_codes)} -> "
            f"{_verdict(flip.candidate.decision, flip.candidate.reason_codes)}"
            + (f" (budget {flip.budget_review} sent it to review)" if flip.budget_review is not None else "")
        )
    for item in report.errors:
        lines.append(f"ERROR {item.code}: {item.correlation_id} thread {item.thread_id}: {item.detail}")
    if report.by_reason:
        lines.append("by reason: " + ", ".join(f"{code} {count}" for code, count in report.by_reason.items()))
    if report.config_unknown:
        lines.append(
            f"NOTE {report.config_unknown} turn(s) were decided under another context config: not checked"
        )
    if report.budget_reviewed:
        lines.append(
            f"NOTE {report.budget_reviewed} turn(s) went to review by a budget: recorded as the policy's "
            "ALLOW (the budget would ask again for a candidate that allows them)"
        )
    if report.unreproducible:
        lines.append(
            f"NOTE {report.unreproducible} turn(s) whose recorded inputs do not recompute (run "
            f"`turngate verify`): not checked, e.g. {', '.join(report.unreproducible_ids[:5])}"
        )
    return "\n".join(lines) + "\n"


def whatif_command(
    settings: Settings,
    *,
    module: str,
    object_name: str | None,
    query: WhatIfQuery,
    as_json: bool,
    out: TextIO,
    err: TextIO,
    ledger_url: str | None = None,
    workers: int | None = None,
) -> int:
    """`turngate policy whatif --module M ...`: 0 nothing changes, 1 something does, 2 error."""
    from turngate.core.context import ContextConfigError
    from turngate.core.policy import PolicyLoadError, load_policy
    from turngate.ledger import LedgerError

    if not module.strip():
        err.write("policy whatif: --module must name a policy module\n")
        return EXIT_ERROR
    try:
        policy = load_policy(module, object_name or "POLICY")
        context_config = settings.context_config()
    except (PolicyLoadError, ContextConfigError) as exc:
        err.write(f"policy whatif: {exc}\n")
        return EXIT_ERROR
    store = _open_ledger(ledger_url or settings.effective_ledger_url, err, "policy whatif")
    if store is None:
        return EXIT_ERROR
    try:
        report = run_whatif(
            store,
            policy,
            context_config=context_config,
            query=query,
            workers=workers,
            progress=TerminalProgress(err, "policy whatif"),
        )
    except LedgerError as exc:
        err.write(f"policy whatif: the ledger could not be read: {exc}\n")
        return EXIT_ERROR
    finally:
        store.close()
    out.write(report.model_dump_json(indent=2) + "\n" if as_json else render_whatif_text(report))
    return EXIT_CHANGED if report.flipped else EXIT_OK


def render_history_text(history: PolicyHistory) -> str:
    lines = [f"{len(history.versions)} policy version(s) over {history.decisions} DECISION(s)"]
    for version in history.versions:
        lines.append(
            f"{version.role.upper():<6} {version.policy_id} v{version.policy_version} "
            f"{version.config_digest}: {version.decisions} turn(s), {version.first_at} .. {version.last_at}"
        )
        for decision, codes in sorted(version.reasons.items()):
            counts = ", ".join(f"{code} {count}" for code, count in codes.items())
            lines.append(f"       {decision}: {counts}")
    return "\n".join(lines) + "\n"


def history_command(
    settings: Settings, *, as_json: bool, out: TextIO, err: TextIO, ledger_url: str | None = None
) -> int:
    """`turngate policy history`: 0, or 2 when the ledger cannot be read."""
    from turngate.ledger import LedgerError

    store = _open_ledger(ledger_url or settings.effective_ledger_url, err, "policy history")
    if store is None:
        return EXIT_ERROR
    try:
        history = policy_history(store)
    except LedgerError as exc:
        err.write(f"policy history: the ledger could not be read: {exc}\n")
        return EXIT_ERROR
    finally:
        store.close()
    out.write(history.model_dump_json(indent=2) + "\n" if as_json else render_history_text(history))
    return EXIT_OK


async def cmd_policy_whatif(args: argparse.Namespace) -> int:
    query = WhatIfQuery(thread_id=args.thread, tenant_id=args.tenant, since=args.since, until=args.until)
    if query.since is not None and query.until is not None and query.since > query.until:
        sys.stderr.write("policy whatif: --since is after --until\n")
        return EXIT_ERROR
    return whatif_command(
        load_settings(),
        module=args.module,
        object_name=args.object,
        query=query,
        as_json=args.json,
        out=sys.stdout,
        err=sys.stderr,
        ledger_url=args.ledger_url,
        workers=args.workers,
    )


async def cmd_policy_history(args: argparse.Namespace) -> int:
    return history_command(
        load_settings(), as_json=args.json, out=sys.stdout, err=sys.stderr, ledger_url=args.ledger_url
    )


def add_policy_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from turngate.arg_types import positive_int

    policy = sub.add_parser("policy", help="what-if a candidate policy over the ledger; policy history")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True, metavar="ACTION")

    whatif = policy_sub.add_parser(
        "whatif",
        help="decide every recorded turn again with a candidate policy and list what changes",
        epilog="exit status: 0 nothing flips, 1 something flips, 2 bad arguments or an unreadable "
        "ledger (docs/POLICIES.md)",
    )
    whatif.add_argument("--module", required=True, help="the candidate policy's module (or module:object)")
    whatif.add_argument("--object", help="the policy object in the module (default POLICY)")
    whatif.add_argument("--thread", help="only this thread's turns")
    whatif.add_argument("--tenant", help="only this tenant's turns")
    whatif.add_argument("--since", type=iso_moment, metavar="ISO", help="turns decided at or after this time")
    whatif.add_argument(
        "--until", type=iso_moment, metavar="ISO", help="turns decided at or before this time"
    )
    whatif.add_argument("--workers", type=positive_int, metavar="N", help="processes (default: one per core)")
    whatif.set_defaults(run=cmd_policy_whatif)

    history = policy_sub.add_parser(
        "history", help="every policy id, version and config digest that decided turns, with counts"
    )
    history.set_defaults(run=cmd_policy_history)

    for parser in (whatif, history):
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        parser.add_argument("--ledger-url", help="default: the configured ledger (TURNGATE_LEDGER_URL)")
