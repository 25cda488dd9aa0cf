"""What the Temporal SDK does when the claim check cannot reach the store, with a real dev
server, a real worker and moto's S3 behind a proxy that stops answering (docs/ARTIFACTS.md,
"When the store fails under the codec"):

- an activity's result that cannot be stored fails the activity for good within the artifact
  deadline, with the artifact error code: the workflow sees it and records it;
- a local activity's result (turngate's are idempotent ledger steps) is retried until it can be
  stored;
- a payload the workflow itself sends or receives (its result, its input) fails that workflow
  task: Temporal retries it, each attempt bounded by the deadline and counted, and the workflow
  goes on once the store answers again.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from tests.artifacts.conftest import new_bucket
from tests.faults.misbehaving_proxy import MisbehavingProxy
from turngate.artifacts.s3 import S3ArtifactStore
from turngate.artifacts.temporal_codec import PAYLOAD_LIMIT_BYTES, turngate_data_converter
from turngate.devserver import DevServer

DEADLINE_S = 1.5
BIG = PAYLOAD_LIMIT_BYTES + 100


@activity.defn(name="claim_check_big_answer")
async def big_answer() -> str:
    return "a" * BIG


@workflow.defn(name="ClaimCheckActivityResult")
class ActivityResultWorkflow:
    @workflow.run
    async def run(self) -> list[object]:
        try:
            await workflow.execute_activity(big_answer, start_to_close_timeout=timedelta(seconds=30))
        except ActivityError as exc:
            cause = exc.cause
            assert isinstance(cause, ApplicationError)
            return [cause.type, cause.non_retryable, cause.message]
        return ["stored", False, ""]


@workflow.defn(name="ClaimCheckLocalActivityResult")
class LocalActivityResultWorkflow:
    @workflow.run
    async def run(self) -> int:
        answer = await workflow.execute_local_activity(
            big_answer, start_to_close_timeout=timedelta(seconds=30)
        )
        return len(answer)


@workflow.defn(name="ClaimCheckEcho")
class EchoWorkflow:
    @workflow.run
    async def run(self, text: str, times: int) -> str:
        return text * times


@dataclass
class Rig:
    proxy: MisbehavingProxy
    client: Client
    failures: list[tuple[str, str]] = field(default_factory=list)
    task_queue: str = field(default_factory=lambda: f"claim-check-{uuid.uuid4().hex[:8]}")

    def worker(self) -> Worker:
        return Worker(
            self.client,
            task_queue=self.task_queue,
            workflows=[ActivityResultWorkflow, LocalActivityResultWorkflow, EchoWorkflow],
            activities=[big_answer],
            workflow_runner=UnsandboxedWorkflowRunner(),
        )

    async def wait_for_failures(self, count: int, timeout_s: float = 30.0) -> None:
        ends = time.monotonic() + timeout_s
        while len(self.failures) < count:
            assert time.monotonic() < ends, f"only {self.failures} after {timeout_s} s"
            await asyncio.sleep(0.1)


@pytest.fixture
async def rig(temporal_server: DevServer, proxy: MisbehavingProxy, moto_endpoint: str) -> AsyncIterator[Rig]:
    store = S3ArtifactStore(
        new_bucket(moto_endpoint), "tg", endpoint_url=proxy.url, connect_timeout=1, read_timeout=20
    )
    failures: list[tuple[str, str]] = []
    converter = turngate_data_converter(
        store, deadline_s=DEADLINE_S, on_failure=lambda op, code: failures.append((op, code))
    )
    client = await Client.connect(temporal_server.address, data_converter=converter)
    yield Rig(proxy, client, failures)


async def test_an_activity_result_the_store_cannot_take_fails_the_activity_for_good(rig: Rig) -> None:
    rig.proxy.set_mode("stall")
    async with rig.worker():
        started = time.monotonic()
        code, non_retryable, message = await rig.client.execute_workflow(
            ActivityResultWorkflow.run,
            id=f"claim-check-activity-{uuid.uuid4().hex[:8]}",
            task_queue=rig.task_queue,
            execution_timeout=timedelta(seconds=60),
        )
        elapsed = time.monotonic() - started
    assert (code, non_retryable) == ("artifact.unavailable", True)
    assert "deadline" in str(message) and "127.0.0.1" not in str(message)
    assert DEADLINE_S <= elapsed < DEADLINE_S + 10  # one attempt, ended by the deadline
    assert rig.failures == [("encode", "artifact.unavailable")]


async def test_a_local_activity_result_is_retried_until_the_store_takes_it(rig: Rig) -> None:
    rig.proxy.set_mode("stall")
    async with rig.worker():
        handle = await rig.client.start_workflow(
            LocalActivityResultWorkflow.run,
            id=f"claim-check-local-{uuid.uuid4().hex[:8]}",
            task_queue=rig.task_queue,
            execution_timeout=timedelta(seconds=120),
        )
        await rig.wait_for_failures(1)
        rig.proxy.set_mode("forward")
        assert await asyncio.wait_for(handle.result(), 60) == BIG
    assert set(rig.failures) == {("encode", "artifact.unavailable")}


async def test_a_workflow_result_the_store_cannot_take_is_retried_until_it_can(rig: Rig) -> None:
    rig.proxy.set_mode("stall")
    async with rig.worker():
        handle = await rig.client.start_workflow(
            EchoWorkflow.run,
            args=["e", BIG],  # a small input, a result over the limit
            id=f"claim-check-result-{uuid.uuid4().hex[:8]}",
            task_queue=rig.task_queue,
            execution_timeout=timedelta(seconds=120),
        )
        await rig.wait_for_failures(1)
        rig.proxy.set_mode("forward")
        assert await asyncio.wait_for(handle.result(), 60) == "e" * BIG
    assert set(rig.failures) == {("encode", "artifact.unavailable")}
    failed = [
        event
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert failed, "the failed attempts are in the history"
    message = failed[0].workflow_task_failed_event_attributes.failure.message
    assert "could not store a Temporal payload" in message and "127.0.0.1" not in message


async def test_a_workflow_input_the_store_cannot_return_is_retried_until_it_can(rig: Rig) -> None:
    handle = await rig.client.start_workflow(
        EchoWorkflow.run,
        args=["i" * BIG, 1],  # stored while the store answers
        id=f"claim-check-input-{uuid.uuid4().hex[:8]}",
        task_queue=rig.task_queue,
        execution_timeout=timedelta(seconds=120),
    )
    rig.proxy.set_mode("stall")
    async with rig.worker():
        await rig.wait_for_failures(1)
        assert rig.failures[0] == ("decode", "artifact.unavailable")
        rig.proxy.set_mode("forward")
        assert await asyncio.wait_for(handle.result(), 60) == "i" * BIG
