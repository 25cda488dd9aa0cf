"""Whether a turn waits for a reviewer, read from Temporal without a worker (its description:
the ``TurngateDecision = REVIEW`` search attribute and the :class:`PendingReview` memo). Used by
the review routes, the ``?wait=`` answer of ``POST /ingress/intent`` and the turn's SSE stream."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from turngate.core.events import Event
from turngate.workflows.shared import SA_DECISION, SA_TENANT_ID, turn_workflow_id
from turngate.workflows.turn_review import PENDING, REVIEW_MEMO, PendingReview

log = logging.getLogger(__name__)

#: Temporal's answer to a describe; past it the turn is taken as not known to wait.
DESCRIBE_TIMEOUT = timedelta(seconds=10)


#: At most this many pending reviews per listing (oldest first).
MAX_LISTED = 200


def pending_query(prefix: str, tenant_id: str | None) -> str:
    """The visibility query of the turns waiting for a verdict (one tenant's, when scoped)."""
    clauses = [
        f"{SA_DECISION.name} = '{PENDING}'",
        "ExecutionStatus = 'Running'",
        f"WorkflowId STARTS_WITH '{_quoted(prefix)}/'",
    ]
    if tenant_id is not None:
        clauses.append(f"{SA_TENANT_ID.name} = '{_quoted(tenant_id)}'")
    return " AND ".join(clauses)


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


async def pending_reviews(client: Client, prefix: str, tenant_id: str | None) -> list[PendingReview]:
    """The waiting turns of the tenant, oldest request first: each turn's :class:`PendingReview`
    is in its memo, so listing needs no worker (a crashed one, say)."""
    found: list[PendingReview] = []
    async for execution in client.list_workflows(pending_query(prefix, tenant_id), limit=MAX_LISTED):
        review = await memo_review(execution.memo_value, execution.id)
        if review is not None:
            found.append(review)
    return sorted(found, key=lambda review: review.requested_at)


def workflow_id_of(intent: Event, prefix: str) -> str:
    """The turn's workflow id from its INTENT (the tenant is part of it)."""
    ids = (intent.stream_id, intent.thread_id, intent.turn_id)
    return turn_workflow_id(*ids, prefix, tenant_id=intent.tenant_id)


async def memo_review(memo_value: Any, workflow_id: str) -> PendingReview | None:
    """The :class:`PendingReview` in a workflow's memo (None: none, or unreadable)."""
    try:
        value: PendingReview = await memo_value(REVIEW_MEMO, type_hint=PendingReview)
    except (KeyError, ValueError, TypeError) as exc:
        log.warning("the review memo of %s is unreadable: %s", workflow_id, exc)
        return None
    return value


async def pending_review(client: Client, workflow_id: str) -> PendingReview | None:
    """The review the turn waits for now (None: it waits for none). Raises ``RPCError``."""
    description = await client.get_workflow_handle(workflow_id).describe(rpc_timeout=DESCRIBE_TIMEOUT)
    waiting = description.typed_search_attributes.get(SA_DECISION) == PENDING
    if description.status != WorkflowExecutionStatus.RUNNING or not waiting:
        return None
    return await memo_review(description.memo_value, workflow_id)


def review_notice(review: PendingReview) -> dict[str, Any]:
    """What a waiting client is told (``review_pending`` on SSE, in a ``?wait=`` answer)."""
    return {
        "review_pending": True,
        "correlation_id": review.correlation_id,
        "thread_id": review.thread_id,
        "turn_id": review.turn_id,
        "reason_codes": list(review.request.reason_codes),
        "role": review.request.role,
        "deadline_at": review.deadline_at.isoformat(),
    }


async def review_pending_answer(client: Client, workflow_id: str) -> dict[str, Any]:
    """``{"review_pending": True, "review": notice}`` for a turn waiting for a reviewer, else
    ``{}`` (also when Temporal does not answer: the answer is only more precise with it)."""
    try:
        review = await pending_review(client, workflow_id)
    except RPCError as exc:
        log.warning("could not tell whether %s waits for a review: %s", workflow_id, exc)
        return {}
    return {} if review is None else {"review_pending": True, "review": review_notice(review)}


def pending_count_source(client: Client, prefix: str) -> Callable[[], Awaitable[float]]:
    """``turngate_reviews_pending``: turns waiting for a verdict (a visibility COUNT)."""

    async def count() -> float:
        return float((await client.count_workflows(pending_query(prefix, None))).count)

    return count


def oldest_age_source(client: Client, prefix: str) -> Callable[[], Awaitable[float]]:
    """``turngate_review_oldest_age_seconds``: how long the oldest waiting turn has waited."""

    async def oldest() -> float:
        reviews = await pending_reviews(client, prefix, None)
        if not reviews:
            return 0.0
        return max(0.0, (datetime.now(UTC) - reviews[0].requested_at).total_seconds())

    return oldest


def review_gauge_sources(
    client: Client, prefix: str
) -> tuple[Callable[[], Awaitable[float]], Callable[[], Awaitable[float]]]:
    """The sources of the pending-review gauges (``TurngateMetrics.watch_reviews``)."""
    return pending_count_source(client, prefix), oldest_age_source(client, prefix)
