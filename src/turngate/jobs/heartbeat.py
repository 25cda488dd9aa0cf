"""Progress for a running job activity: heartbeats (the resume cursor) and progress signals.

Heartbeat details are a :class:`Checkpoint`; the SDK sends at most one heartbeat per throttle
interval, always the newest. A background loop re-sends the newest checkpoint every
``interval_s`` (so a long remote call still heartbeats and can be cancelled) and signals the
job's workflow (``report_progress``) when the count changed, which feeds the ``progress`` query.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime

from pydantic import BaseModel, Field
from temporalio import activity

from turngate.jobs.domain.models import ProgressReport

log = logging.getLogger(__name__)


class Checkpoint(BaseModel):
    """How far an activity got: items before ``cursor`` are stored in ``segments``."""

    cursor: int = 0
    segments: list[str] = Field(default_factory=list)
    started_at: str  # first attempt's start: the wall clock runs across retries
    items_total: int = 0


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def elapsed_s(started_at: str) -> float:
    start = datetime.fromisoformat(started_at.replace("Z", "+00:00"))
    return (datetime.now(UTC) - start).total_seconds()


def resume_checkpoint() -> Checkpoint:
    """The checkpoint of the last attempt's newest heartbeat, or a fresh one."""
    details = activity.info().heartbeat_details
    if details:
        with contextlib.suppress(ValueError, TypeError):
            return Checkpoint.model_validate(details[0])
    return Checkpoint(started_at=now_iso())


class ProgressReporter:
    """Heartbeats a checkpoint and signals progress to the job's workflow while a job runs."""

    def __init__(self, checkpoint: Checkpoint, *, interval_s: float = 1.0) -> None:
        self.checkpoint = checkpoint
        self.items_done = checkpoint.cursor  # may run ahead of the cursor (index build, threads)
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self._signalled: tuple[int, int] | None = None

    async def __aenter__(self) -> ProgressReporter:
        self.beat()
        await self._signal()
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if exc[0] is None:
            self.items_done = max(self.items_done, self.checkpoint.cursor)
            await self._signal()

    def advance(self, cursor: int, segment: str) -> None:
        """Items up to ``cursor`` are stored in ``segment``: record it in the next heartbeat."""
        self.checkpoint.cursor = cursor
        self.checkpoint.segments.append(segment)
        self.items_done = max(self.items_done, cursor)
        self.beat()

    def beat(self) -> None:
        activity.heartbeat(self.checkpoint.model_dump())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            self.beat()
            await self._signal()

    async def _signal(self) -> None:
        state = (self.items_done, self.checkpoint.items_total)
        if state == self._signalled:
            return
        info = activity.info()
        report = ProgressReport(
            items_done=state[0], items_total=state[1], started_at=self.checkpoint.started_at
        )
        try:
            handle = activity.client().get_workflow_handle(info.workflow_id or "")
            await handle.signal("report_progress", report)
            self._signalled = state
        except Exception as exc:  # progress is best effort: the job itself goes on
            log.warning("job %s: progress signal failed: %s", info.workflow_id, exc)
