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
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from turngate.workflows.turn import TurnWorkflow

HISTORIES = Path(__file__).parent / "histories"
COMPATIBLE = [
    "allow_with_refs",
    "observer_deny",
    "llm_timeout",
    "local_provider",
    "local_provider_timeout",
    "tool_loop",
    "spend_alias",
    "spend_request",
    "turn_refs",
]


def _history(name: str) -> WorkflowHistory:
    return WorkflowHistory.from_json(name, (HISTORIES / f"{name}.json").read_text())


def _replayer(sandboxed: bool = True) -> Replayer:
    runner = {} if sandboxed else {"workflow_runner": UnsandboxedWorkflowRunner()}
    return Replayer(workflows=[TurnWorkflow], data_converter=pydantic_data_converter, **runner)


# Both runners: a worker may run with TURNGATE_WORKFLOW_SANDBOX=false, and then these replays
# (plus the sandboxed ones, which catch non-deterministic calls) are its determinism check.
@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandbox", "no-sandbox"])
@pytest.mark.parametrize("name", COMPATIBLE)
async def test_recorded_history_replays(name: str, sandboxed: bool) -> None:
    result = await _replayer(sandboxed).replay_workflow(_history(name), raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


async def test_divergent_history_fails() -> None:
    result = await _replayer().replay_workflow(
        _history("divergent_provider_activity"), raise_on_replay_failure=False
    )
    assert result.replay_failure is not None
    assert "nondetermin" in str(result.replay_failure).lower()
