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
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from tests.replay.changed_turns import TimerFirstTurn, WallClockTurn
from turngate.worker.sandbox import workflow_runner
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
    "one_step",
    "one_step_local",
    "one_step_timeout",
    "indexed_step",
    "indexed_step_local",
    "counted_step",
    "counted_step_local",
    "turn_refs",
    "external_refs",
    "snapshot_step",
    "snapshot_step_local",
    "loop_guard",
    "ending_memo",
    # Turns a policy sent to human review: approved (the review update), and timed out (the timer).
    "review_approved",
    "review_timed_out",
    "request_options",
    # A turn a budget sent to review (on_exceed: review), approved, then run on its spend plan.
    "budget_review",
]


def _history(name: str) -> WorkflowHistory:
    return WorkflowHistory.from_json(name, (HISTORIES / f"{name}.json").read_text())


#: The strict sandbox (the SDK's default: each run re-imports the workflow module with the
#: restrictions applied, so it catches non-deterministic calls in turngate's workflow code), the
#: worker's runner (turngate passed through), and the plain runner (TURNGATE_WORKFLOW_SANDBOX=false).
RUNNERS = {
    "strict-sandbox": SandboxedWorkflowRunner,
    "worker-sandbox": lambda: workflow_runner(True, pydantic_data_converter),
    "no-sandbox": UnsandboxedWorkflowRunner,
}


def _replayer(runner: str = "strict-sandbox", workflow: type = TurnWorkflow) -> Replayer:
    return Replayer(
        workflows=[workflow], data_converter=pydantic_data_converter, workflow_runner=RUNNERS[runner]()
    )


# Every runner a worker may use, and the strict sandbox, which checks the calls the others do not.
@pytest.mark.parametrize("runner", list(RUNNERS))
@pytest.mark.parametrize("name", COMPATIBLE)
async def test_recorded_history_replays(name: str, runner: str) -> None:
    result = await _replayer(runner).replay_workflow(_history(name), raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


async def test_divergent_history_fails() -> None:
    result = await _replayer().replay_workflow(
        _history("divergent_provider_activity"), raise_on_replay_failure=False
    )
    assert result.replay_failure is not None
    assert "nondetermin" in str(result.replay_failure).lower()


@pytest.mark.parametrize("runner", list(RUNNERS))
async def test_changed_command_sequence_fails_replay(runner: str) -> None:
    result = await _replayer(runner, TimerFirstTurn).replay_workflow(
        _history("allow_with_refs"), raise_on_replay_failure=False
    )
    assert result.replay_failure is not None
    assert "nondetermin" in str(result.replay_failure).lower()


async def test_wall_clock_read_in_workflow_code_fails_strict_replay() -> None:
    result = await _replayer("strict-sandbox", WallClockTurn).replay_workflow(
        _history("allow_with_refs"), raise_on_replay_failure=False
    )
    assert result.replay_failure is not None
    assert "datetime.datetime.now" in str(result.replay_failure)
