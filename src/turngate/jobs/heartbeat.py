"""Progress of a running job activity: the heartbeat carries its resume cursor and nothing else.

Heartbeat details are a :class:`~turngate.jobs.domain.models.JobCheckpoint` of bounded size: a
cursor, the segments written since the last segment group, and the digest of the newest group
(groups are written once per :data:`SEGMENT_GROUP_SIZE` segments and chained). The SDK sends at
most one heartbeat per throttle interval, always the newest; a background loop re-sends it every
``interval_s`` so a long remote call still heartbeats and can be cancelled. Readers get progress
from the same heartbeat (``describe`` shows the pending activity's details) or from the
workflow's ``progress`` query: no signal, so a job's history does not grow while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime

from temporalio import activity

from turngate.artifacts import ArtifactStore
from turngate.jobs.cases.segments import put_segment_group, read_segment_groups
from turngate.jobs.domain.models import SEGMENT_GROUP_SIZE, JobCheckpoint

log = logging.getLogger(__name__)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def elapsed_s(started_at: str) -> float:
    start = datetime.fromisoformat(started_at.replace("Z", "+00:00"))
    return (datetime.now(UTC) - start).total_seconds()


def resume_checkpoint(given: JobCheckpoint | None = None) -> JobCheckpoint:
    """This step's last attempt's newest heartbeat, else the checkpoint the step was given (the
    previous step's), else a fresh one."""
    details = activity.info().heartbeat_details
    if details:
        with contextlib.suppress(ValueError, TypeError):
            return JobCheckpoint.model_validate(details[0])
    if given is not None:
        return given.model_copy(deep=True, update={"steps": given.steps + 1})
    return JobCheckpoint(started_at=now_iso(), steps=1)


def job_id() -> str:
    job = activity.info().workflow_id
    assert job is not None, "a job activity runs in its job's workflow"
    return job


class ProgressReporter:
    """Heartbeats a checkpoint while a job runs; :meth:`advance` records each stored segment."""

    def __init__(self, checkpoint: JobCheckpoint, store: ArtifactStore, *, interval_s: float = 1.0) -> None:
        self.checkpoint = checkpoint
        self._store = store
        self.items_done = max(checkpoint.items_done, checkpoint.cursor)
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ProgressReporter:
        self.beat()
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def advance(self, cursor: int, segment: str) -> None:
        """Items up to ``cursor`` are stored in ``segment``: record it in the next heartbeat,
        folding the pending segments into a new group once there are enough of them."""
        cp = self.checkpoint
        pending = [*cp.pending, segment]
        if len(pending) >= SEGMENT_GROUP_SIZE:
            group = await asyncio.to_thread(put_segment_group, self._store, job_id(), cp.groups, pending)
            cp.groups, cp.group_count, pending = group, cp.group_count + 1, []
        cp.pending = pending
        cp.cursor = cursor
        self.items_done = max(self.items_done, cursor)
        self.beat()

    async def segments(self) -> list[str]:
        """Every segment stored so far, in order."""
        grouped = await asyncio.to_thread(read_segment_groups, self._store, self.checkpoint.groups)
        return [*grouped, *self.checkpoint.pending]

    def beat(self) -> None:
        self.checkpoint.items_done = self.items_done
        activity.heartbeat(self.checkpoint.model_dump(mode="json"))

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            self.beat()
