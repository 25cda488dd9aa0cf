"""Text and JSON rendering of audit reports, and the `turngate verify` / `replay` commands.

Each ``*_command`` does all the work from a :class:`~turngate.settings.Settings` (opens the
ledger, the artifact store, the context config), writes the report to ``out`` and diagnostics to
``err``, and returns the process exit code: 0 when everything verified, 1 when something failed,
2 when the check could not run (bad configuration, unreachable ledger or Temporal), and for
verify 3 when nothing failed but some DECISIONs could not be recomputed (``--allow-unchecked``
accepts those: 0, still reported).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from turngate.audit.verification import AuditKind, AuditReport, Finding, verify_all
from turngate.settings import Settings

if TYPE_CHECKING:  # replay imports the workflow module (temporalio), which `verify` does not need
    from turngate.audit.replay import TurnReplay, WorkflowReplayReport

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_ERROR = 2
EXIT_UNCHECKED = 3
#: Progress lines start after this many seconds and repeat at most this often.
PROGRESS_AFTER_S = 2.0
PROGRESS_EVERY_S = 2.0


# --------------------------------------------------------------------------- verify


def _finding_line(label: str, finding: Finding) -> str:
    where = f"index {finding.index}" if finding.index is not None else "-"
    cid = f" {finding.correlation_id}" if finding.correlation_id else ""
    return f"{label} {where}{cid}: {finding.kind.value}: {finding.detail}"


def render_verify_text(report: AuditReport) -> str:
    """A summary line, then every failure, warning and info line with its index and reason."""
    scope = []
    if report.thread_id is not None:
        scope.append(f"thread {report.thread_id!r}")
    if report.since_index is not None or report.until_index is not None:
        low = report.since_index if report.since_index is not None else 0
        high = report.until_index if report.until_index is not None else "head"
        scope.append(f"indexes {low}..{high}")
    head = (
        f"head {report.head_index} {report.head_digest}" if report.head_index is not None else "empty ledger"
    )
    if report.failures:
        status = "FAILED"
    elif report.unchecked_decisions and not report.allow_unchecked:
        status = "INCOMPLETE"
    else:
        status = "OK"
    summary = (
        f"verify {status}{' (' + ', '.join(scope) + ')' if scope else ''}: "
        f"{report.checked_events} events, {report.checked_decisions} decisions, "
        f"{report.checked_artifacts} artifacts checked in {report.duration_ms / 1000:.1f} s "
        f"({report.events_per_s:.0f} events/s); {head}; "
        f"{len(report.failures)} failure(s), {len(report.warnings)} warning(s)"
    )
    if report.unchecked_decisions:
        allowed = " (allowed by --allow-unchecked)" if report.allow_unchecked else ""
        summary += f", {report.unchecked_decisions} decision(s) unchecked{allowed}"
    lines = [summary]
    lines += [_finding_line("FAIL", f) for f in report.failures]
    lines += [_finding_line("UNCHECKED", f) for f in report.unchecked]
    if report.unchecked_decisions and not report.allow_unchecked:
        accepted = "the failures still fail" if report.failures else "exit 0, still reported"
        lines.append(
            f"verify is not OK: {report.unchecked_decisions} DECISION(s) could not be recomputed "
            f"(the UNCHECKED lines say why). --allow-unchecked accepts them: {accepted}"
        )
    lines += [_finding_line("WARN", f) for f in report.warnings]
    lines += [_finding_line("INFO", f) for f in report.info]
    return "\n".join(lines) + "\n"


class ProgressPrinter:
    """``progress(done, total)`` for :func:`verify_all`: a line on ``err`` now and then, only for
    runs that take longer than :data:`PROGRESS_AFTER_S`."""

    def __init__(
        self, err: TextIO, *, after_s: float = PROGRESS_AFTER_S, every_s: float = PROGRESS_EVERY_S
    ) -> None:
        self._err = err
        self._started = time.monotonic()
        self._next = self._started + after_s
        self._every = every_s

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now < self._next or total <= 0:
            return
        self._next = now + self._every
        events = total // 2
        phase = (
            f"digests and chain {done}/{events}"
            if done <= events
            else f"decisions and artifacts {done - events}/{events}"
        )
        self._err.write(f"verify: {100 * done // total}% ({phase} events, {now - self._started:.0f} s)\n")
        self._err.flush()


def verify_command(
    settings: Settings,
    *,
    thread_id: str | None,
    since: int | None,
    until: int | None,
    as_json: bool,
    out: TextIO,
    err: TextIO,
    snapshot_grace: timedelta | None = None,
    ledger_url: str | None = None,
    check_artifacts: bool = True,
    workers: int | None = None,
    cache_events: int | None = None,
    replay_policy: bool = False,
    events_file: Path | None = None,
    artifacts_dir: str | None = None,
    allow_unchecked: bool = False,
) -> int:
    """`turngate verify [--thread T] [--since N] [--until N] [--json]`: 0 ok, 1 failures, 2 error,
    3 DECISIONs not recomputed (their config could not be had; ``allow_unchecked``: 0).

    ``replay_policy``: also decide every DECISION of the configured policy again
    (:mod:`turngate.audit.policy_replay`); a different answer is a failure. With ``events_file``
    (``--events``) an exported stream is verified offline instead of the ledger
    (:mod:`turngate.audit.export`); its artifacts come from ``artifacts_dir`` or are not
    checked."""
    from turngate.artifacts import ArtifactConfigError, open_artifact_store
    from turngate.audit.export import ExportError, ledger_from_export
    from turngate.core.context import ContextConfigError
    from turngate.ledger import LedgerError, LedgerStore

    try:
        context_config = settings.context_config()
        if events_file is not None:
            artifacts = open_artifact_store(artifacts_dir) if artifacts_dir else None
        else:
            artifacts = open_artifact_store(settings.effective_artifacts) if check_artifacts else None
    except (ContextConfigError, ArtifactConfigError) as exc:
        err.write(f"verify: {exc}\n")
        return EXIT_ERROR
    try:
        with contextlib.ExitStack() as stack:
            if events_file is not None:
                store = stack.enter_context(ledger_from_export(events_file))
            else:
                try:
                    store = LedgerStore(ledger_url or settings.effective_ledger_url)
                except LedgerError as exc:
                    err.write(f"verify: cannot open the ledger: {exc}\n")
                    return EXIT_ERROR
                stack.callback(store.close)
            report = verify_all(
                store,
                artifacts=artifacts,
                context_config=context_config,
                thread_id=thread_id,
                since_index=since,
                until_index=until,
                progress=ProgressPrinter(err),
                snapshot_grace=snapshot_grace,
                workers=workers,
                cache_events=cache_events,
                allow_unchecked=allow_unchecked,
            )
            if replay_policy:
                report = _with_policy_replay(
                    report, store, settings, context_config, thread_id, since, until, artifacts
                )
    except (ExportError, OSError) as exc:
        err.write(f"verify: cannot read the export {events_file}: {exc}\n")
        return EXIT_ERROR
    except LedgerError as exc:
        err.write(f"verify: the ledger could not be read: {exc}\n")
        return EXIT_ERROR
    out.write(report.model_dump_json(indent=2) + "\n" if as_json else render_verify_text(report))
    if report.failures:
        return EXIT_FAILED
    return EXIT_OK if report.ok else EXIT_UNCHECKED


def _with_policy_replay(
    report: AuditReport,
    store: Any,
    settings: Settings,
    context_config: Any,
    thread_id: str | None,
    since: int | None,
    until: int | None,
    config_store: Any,
) -> AuditReport:
    from turngate.audit.policy_replay import replay_policy

    _, found = replay_policy(
        store,
        context_config=context_config,
        policy_module=settings.policy_module,
        policy_object=settings.policy_object,
        thread_id=thread_id,
        since=since,
        until=until,
        config_store=config_store,
    )
    findings = [f for f in found if f.kind == AuditKind.POLICY_REPLAY_MISMATCH]
    info = [*report.info, *(f for f in found if f.kind != AuditKind.POLICY_REPLAY_MISMATCH)]
    failures = [*report.failures, *findings]
    return report.model_copy(update={"failures": failures, "info": info, "ok": report.ok and not findings})


# --------------------------------------------------------------------------- replay turn


def render_turn_replay_text(replay: TurnReplay) -> str:
    where = []
    if replay.thread_id is not None:
        where.append(f"thread {replay.thread_id}")
    if replay.turn_id is not None:
        where.append(f"turn {replay.turn_id}")
    if replay.decision_index is not None:
        where.append(f"DECISION at index {replay.decision_index}")
    failed = sum(1 for c in replay.checks if c.status == "fail")
    status = "OK" if replay.ok else f"FAILED ({failed} check(s))"
    policy = replay.policy_module or "observer policy (no policy module)"
    lines = [
        f"replay turn {replay.correlation_id} ({', '.join(where) or 'not recorded'}) with {policy}: {status}"
    ]
    if replay.recorded:
        lines.append(
            f"  recorded: {replay.recorded.get('decision')} {replay.recorded.get('reason_codes')}"
            + (
                f"; replayed: {replay.replayed.get('decision')} {replay.replayed.get('reason_codes')}"
                if replay.replayed
                else ""
            )
        )
    width = max((len(c.name) for c in replay.checks), default=0)
    for check in replay.checks:
        lines.append(f"  {check.status.upper():<4} {check.name:<{width}}  {check.detail}".rstrip())
    return "\n".join(lines) + "\n"


def replay_turn_command(
    settings: Settings,
    *,
    correlation_id: str,
    as_json: bool,
    out: TextIO,
    err: TextIO,
    policy_module: str | None = None,
    policy_object: str | None = None,
    ledger_url: str | None = None,
    check_artifacts: bool = True,
) -> int:
    """`turngate replay turn <correlation_id>`: 0 every check passed, 1 a check failed, 2 error.

    The policy comes from ``policy_module`` or else the configured one (``TURNGATE_POLICY_MODULE``).
    """
    from turngate.artifacts import ArtifactConfigError, open_artifact_store
    from turngate.audit.replay import replay_turn
    from turngate.core.context import ContextConfigError
    from turngate.ledger import LedgerError, LedgerStore

    try:
        context_config = settings.context_config()
        artifacts = open_artifact_store(settings.effective_artifacts) if check_artifacts else None
    except (ContextConfigError, ArtifactConfigError) as exc:
        err.write(f"replay: {exc}\n")
        return EXIT_ERROR
    try:
        store = LedgerStore(ledger_url or settings.effective_ledger_url)
    except LedgerError as exc:
        err.write(f"replay: cannot open the ledger: {exc}\n")
        return EXIT_ERROR
    try:
        replay = replay_turn(
            store,
            correlation_id,
            context_config=context_config,
            policy_module=policy_module if policy_module is not None else settings.policy_module,
            policy_object=policy_object or settings.policy_object,
            artifacts=artifacts,
        )
    except LedgerError as exc:
        err.write(f"replay: the ledger could not be read: {exc}\n")
        return EXIT_ERROR
    finally:
        store.close()
    out.write(replay.model_dump_json(indent=2) + "\n" if as_json else render_turn_replay_text(replay))
    return EXIT_OK if replay.ok else EXIT_FAILED


# --------------------------------------------------------------------------- replay workflows


def render_workflow_replay_text(report: WorkflowReplayReport) -> str:
    source = f"query {report.query!r}" if report.query is not None else "the given workflow ids"
    status = "OK" if report.ok else "FAILED"
    lines = [
        f"replay workflows {status}: {report.checked} history(ies) from {source} replayed against the "
        f"current TurnWorkflow in {report.duration_ms / 1000:.1f} s; "
        f"{report.failed} nondeterministic or failed"
    ]
    for result in report.results:
        if not result.ok:
            lines.append(f"FAIL {result.workflow_id} (run {result.run_id}): {result.error}")
    return "\n".join(lines) + "\n"


async def replay_workflows_command(
    settings: Settings,
    *,
    query: str | None,
    limit: int,
    as_json: bool,
    out: TextIO,
    err: TextIO,
    workflow_ids: Sequence[str] = (),
) -> int:
    """`turngate replay workflows [--query Q] [--limit N]`: 0 all replayed, 1 a failure, 2 error."""
    from temporalio.service import RPCError

    from turngate.audit.replay import DEFAULT_WORKFLOW_QUERY, replay_workflows
    from turngate.temporal_client import connect, connect_config

    try:
        client = await connect(settings)
    except (RPCError, RuntimeError, OSError) as exc:
        address = connect_config(settings).get("target_host")
        err.write(f"replay: cannot connect to Temporal at {address}: {exc}\n")
        return EXIT_ERROR
    try:
        report = await replay_workflows(
            client, query=query or DEFAULT_WORKFLOW_QUERY, limit=limit, workflow_ids=workflow_ids
        )
    except RPCError as exc:
        err.write(f"replay: Temporal refused the listing or a history fetch: {exc}\n")
        return EXIT_ERROR
    out.write(report.model_dump_json(indent=2) + "\n" if as_json else render_workflow_replay_text(report))
    return EXIT_OK if report.ok else EXIT_FAILED
