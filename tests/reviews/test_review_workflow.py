"""The turn's review step on a real Temporal dev server, with fake activities (in-memory ledger):
the wait, each verdict, the deadline, and verdicts the workflow refuses."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from temporalio import activity
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from tests.stack import envelope
from tests.workflows.test_turn_branches import FakeTurnActivities, _boundary, env  # noqa: F401
from turngate.core.events import IntentPrincipal, parse_intent
from turngate.core.review import Approver, ReviewBlock, ReviewVerdict, caller_of, review_problems
from turngate.workflows.shared import ReviewRequested, TurnInput, TurnResult
from turngate.workflows.turn import TurnWorkflow
from turngate.workflows.turn_activities import NOTIFY_REVIEW
from turngate.workflows.turn_review import REVIEW_QUERY, PendingReview

REVIEWER = Approver(key_id="k-reviewer", tenant_id=None, roles=("review",))


NOTICES: list[ReviewRequested] = []


@activity.defn(name=NOTIFY_REVIEW)
async def fake_notify_review(inp: ReviewRequested) -> None:
    NOTICES.append(inp)


async def _run_worker(env, task_queue: str, fakes: FakeTurnActivities) -> Worker:  # noqa: F811
    return Worker(
        env.client,
        task_queue=task_queue,
        workflows=[TurnWorkflow],
        activities=[
            fakes.begin_turn,
            fakes.append_event,
            fakes.call_provider,
            fakes.call_and_record,
            fake_notify_review,
        ],
    )


async def _pending(handle: WorkflowHandle) -> PendingReview:
    for _ in range(200):
        pending = await handle.query(REVIEW_QUERY, result_type=PendingReview | None)
        if pending is not None:
            return pending
        await asyncio.sleep(0.05)
    raise AssertionError("the turn never waited for a review")


async def _start(
    env,  # noqa: F811
    policy: str,
    message: str = "please refund",
    shape: int = 1,
    principal=None,
    webhook: bool = False,
):
    task_queue = f"turns-{uuid.uuid4()}"
    boundary = _boundary(task_queue, policy, shape).model_copy(update={"review_webhook": webhook})
    fakes = FakeTurnActivities(boundary)
    cid = f"c-{uuid.uuid4()}"
    parsed = parse_intent(envelope(message, correlation_id=cid))
    if principal is not None:  # set by the API from the caller's key, never from the body
        parsed = parsed.model_copy(update={"principal": IntentPrincipal(**principal)})
    handle = await env.client.start_workflow(
        TurnWorkflow.run,
        TurnInput(envelope=parsed),
        id=f"turn-{cid}",
        task_queue=task_queue,
        execution_timeout=timedelta(seconds=60),
    )
    return fakes, cid, handle, await _run_worker(env, task_queue, fakes)


def _verdict(verdict: str = "approve", approver: Approver = REVIEWER) -> ReviewVerdict:
    return ReviewVerdict(verdict=verdict, approver=approver)  # type: ignore[arg-type]


async def _refused(handle: WorkflowHandle, verdict: ReviewVerdict) -> str:
    """The refusal's type; ``completed`` when the turn already ended (the API answers 409)."""
    with pytest.raises((WorkflowUpdateFailedError, RPCError)) as raised:
        await handle.execute_update(TurnWorkflow.review, verdict)
    if isinstance(raised.value, RPCError):
        assert raised.value.status == RPCStatusCode.NOT_FOUND
        return "completed"
    cause = raised.value.cause
    assert isinstance(cause, ApplicationError)
    return str(cause.type)


@pytest.mark.parametrize("shape", [1, 3])
async def test_an_approved_turn_waits_then_records_allow_with_its_review(env, shape) -> None:  # noqa: F811
    fakes, cid, handle, worker = await _start(env, "tests.reviews.policies:REVIEW", shape=shape)
    async with worker:
        pending = await _pending(handle)
        assert pending.request.reason_codes == ("policy.review_keyword",)
        assert pending.manifest and pending.correlation_id == cid
        assert fakes.kinds(cid) == ["INTENT"] and fakes.calls == []  # nothing decided yet
        answer = await handle.execute_update(TurnWorkflow.review, _verdict())
        assert answer.verdict == "approve"
        result: TurnResult = await handle.result()
    assert (result.decision, result.reason_codes) == ("ALLOW", ["policy.review_keyword", "review.approved"])
    assert fakes.kinds(cid) == ["INTENT", "DECISION", "EXECUTION"] and len(fakes.calls) == 1
    block = ReviewBlock.from_payload(fakes.recorded(cid, "DECISION").payload["review"])
    assert (block.verdict, block.approver) == ("approve", REVIEWER)
    assert block.request.deadline_s == 3600


async def test_a_denied_review_records_deny_and_calls_nothing(env) -> None:  # noqa: F811
    fakes, cid, handle, worker = await _start(env, "tests.reviews.policies:REVIEW")
    async with worker:
        await _pending(handle)
        await handle.execute_update(TurnWorkflow.review, _verdict("deny"))
        result = await handle.result()
        # a second verdict is refused once the first is taken
        assert await _refused(handle, _verdict()) == "completed"
    assert (result.decision, result.reason_codes) == ("DENY", ["review.denied"])
    assert fakes.kinds(cid) == ["INTENT", "DECISION"] and fakes.calls == []
    assert fakes.recorded(cid, "DECISION").payload["review"]["verdict"] == "deny"


async def test_a_missed_deadline_is_a_timed_out_deny(env) -> None:  # noqa: F811
    fakes, cid, handle, worker = await _start(env, "tests.reviews.policies:SHORT")
    async with worker:
        result = await handle.result()
    assert (result.decision, result.reason_codes) == ("DENY", ["review.timed_out"])
    review = fakes.recorded(cid, "DECISION").payload["review"]
    assert review["verdict"] == "timed_out" and "approver" not in review
    assert fakes.calls == []


async def test_refused_verdicts_never_enter_the_history(env) -> None:  # noqa: F811
    principal = {"tenant_id": "t1", "key_id": "k-author"}
    fakes, _, handle, worker = await _start(env, "tests.reviews.policies:FOUR_EYES", principal=principal)
    async with worker:
        await _pending(handle)
        author = Approver(key_id="k-author", tenant_id="t1", roles=("review",))
        assert await _refused(handle, _verdict(approver=author)) == "review.four_eyes"
        no_role = Approver(key_id="k-other", tenant_id="t1", roles=("intent.write",))
        assert await _refused(handle, _verdict(approver=no_role)) == "review.forbidden"
        elsewhere = Approver(key_id="k-other", tenant_id="t2", roles=("review",))
        assert await _refused(handle, _verdict(approver=elsewhere)) == "review.not_found"
        reviewer = Approver(key_id="k-other", tenant_id="t1", roles=("review",))
        await handle.execute_update(TurnWorkflow.review, _verdict(approver=reviewer))
        assert await _refused(handle, _verdict(approver=reviewer)) in {"review.already_decided", "completed"}
        result = await handle.result()
    assert result.decision == "ALLOW" and len(fakes.calls) == 1


async def test_a_turn_without_review_is_unchanged(env) -> None:  # noqa: F811
    fakes, cid, handle, worker = await _start(env, "tests.reviews.policies:REVIEW", message="hello")
    async with worker:
        result = await handle.result()
        assert await _refused(handle, _verdict()) == "completed"
    assert (result.decision, result.reason_codes) == ("ALLOW", ["policy.no_review_needed"])
    assert "review" not in fakes.recorded(cid, "DECISION").payload


async def test_the_review_webhook_is_told_only_when_configured(env) -> None:  # noqa: F811
    NOTICES.clear()
    for webhook in (False, True):
        _, cid, handle, worker = await _start(env, "tests.reviews.policies:REVIEW", webhook=webhook)
        async with worker:
            await _pending(handle)
            await handle.execute_update(TurnWorkflow.review, _verdict("deny"))
            await handle.result()
        told = [notice.correlation_id for notice in NOTICES]
        assert told == ([cid] if webhook else [])
    notice = NOTICES[0]
    assert notice.reason_codes == ["policy.review_keyword"] and notice.role == "review"
    assert notice.deadline_at > notice.requested_at


async def test_a_review_a_later_rule_denies_is_never_asked(env) -> None:  # noqa: F811
    task_queue = f"turns-{uuid.uuid4()}"
    fakes = FakeTurnActivities(_boundary(task_queue, "tests.reviews.policies:REVIEW"))
    cid = f"c-{uuid.uuid4()}"
    body = envelope("please refund", correlation_id=cid, requested_model_id="nope:some-model")
    async with await _run_worker(env, task_queue, fakes):
        result = await env.client.execute_workflow(
            TurnWorkflow.run,
            TurnInput(envelope=parse_intent(body)),
            id=f"turn-{cid}",
            task_queue=task_queue,
            execution_timeout=timedelta(seconds=30),
        )
    assert (result.decision, result.reason_codes) == ("DENY", ["model.unavailable"])
    payload = fakes.recorded(cid, "DECISION").payload
    assert "verdict" not in payload["review"]  # the policy asked; nobody was
    caller = caller_of(fakes.recorded(cid, "INTENT").payload, "user", None)
    assert review_problems(payload, payload["review"], caller) == []


async def test_a_rerun_after_the_decision_takes_the_recorded_verdict(env) -> None:  # noqa: F811
    fakes, cid, handle, worker = await _start(env, "tests.reviews.policies:REVIEW")
    async with worker:
        await _pending(handle)
        await handle.execute_update(TurnWorkflow.review, _verdict())
        await handle.result()
        # the EXECUTION never reached the ledger (a worker lost after the DECISION): a new run
        # of the turn finds the approved DECISION and executes it without asking again
        fakes.events = [
            e for e in fakes.events if not (e.correlation_id == cid and str(e.kind) == "EXECUTION")
        ]
        decision = fakes.recorded(cid, "DECISION")
        again = await env.client.execute_workflow(
            TurnWorkflow.run,
            TurnInput(envelope=parse_intent(envelope("please refund", correlation_id=cid))),
            id=f"turn-{cid}-again",
            task_queue=(await handle.describe()).task_queue,
            execution_timeout=timedelta(seconds=30),
        )
    assert again.decision == "ALLOW" and again.decision_event.digest == decision.digest
    # called again: this made-up loss removed the EXECUTION itself (a real rerun finds it first)
    assert fakes.kinds(cid) == ["INTENT", "DECISION", "EXECUTION"] and len(fakes.calls) == 2
