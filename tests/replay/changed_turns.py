"""Workflows that change the turn in ways replay must refuse (registered under the turn's name)."""

from __future__ import annotations

import datetime

from temporalio import workflow

from turngate.workflows.shared import TurnInput, TurnResult
from turngate.workflows.turn import TurnWorkflow


@workflow.defn(name="TurnWorkflow")
class TimerFirstTurn(TurnWorkflow):
    """A turn that waits on a timer before its first step: another command sequence."""

    @workflow.run
    async def run(self, inp: TurnInput) -> TurnResult:
        await workflow.sleep(0.001)
        return await super().run(inp)


@workflow.defn(name="TurnWorkflow")
class WallClockTurn(TurnWorkflow):
    """A turn whose code reads the wall clock (differs on every replay)."""

    @workflow.run
    async def run(self, inp: TurnInput) -> TurnResult:
        if datetime.datetime.now().microsecond < 0:  # never true: the read itself is the change
            raise RuntimeError("unreachable")
        return await super().run(inp)
