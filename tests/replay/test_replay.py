"""Recorded TurnWorkflow histories must replay against the current code (no nondeterminism).

Fixtures come from `python -m tests.replay.record`; never re-record them to make this pass:
guard workflow changes with workflow.patched(). One history is deliberately divergent (a
different activity was scheduled) and must fail, proving the check can fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from turngate.workflows.turn import TurnWorkflow

HISTORIES = Path(__file__).parent / "histories"
COMPATIBLE = ["allow_with_refs", "observer_deny", "llm_timeout"]


def _history(name: str) -> WorkflowHistory:
    return WorkflowHistory.from_json(name, (HISTORIES / f"{name}.json").read_text())


def _replayer() -> Replayer:
    return Replayer(workflows=[TurnWorkflow], data_converter=pydantic_data_converter)


@pytest.mark.parametrize("name", COMPATIBLE)
async def test_recorded_history_replays(name: str) -> None:
    result = await _replayer().replay_workflow(_history(name), raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


async def test_divergent_history_fails() -> None:
    result = await _replayer().replay_workflow(
        _history("divergent_provider_activity"), raise_on_replay_failure=False
    )
    assert result.replay_failure is not None
    assert "nondetermin" in str(result.replay_failure).lower()
