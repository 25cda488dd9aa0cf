"""The worker's workflow runner builds the turn's definition once, not once per workflow run."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from types import CodeType

import pytest
from pydantic import SecretStr
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import PayloadCodec, SerializationContext, WithSerializationContext
from temporalio.worker import Replayer, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from turngate.encryption import generate_key_entry
from turngate.settings import load_settings
from turngate.temporal_client import data_converter
from turngate.worker.sandbox import ContextFreeSandboxRunner, ignores_context, workflow_runner
from turngate.workflows.turn import TurnWorkflow

HISTORY = Path(__file__).parent / "histories" / "allow_with_refs.json"
TURN_MODULE = str(Path("turngate", "workflows", "turn.py"))
#: Module code objects of the turn's workflow module executed while a count is on.
_executed: list[str] | None = None


def _note_exec(event: str, args: tuple[object, ...]) -> None:
    code = args[0] if event == "exec" and args else None
    if _executed is not None and isinstance(code, CodeType) and code.co_filename.endswith(TURN_MODULE):
        _executed.append(code.co_filename)


sys.addaudithook(_note_exec)  # audit hooks cannot be removed: this one counts only when asked


async def _turn_module_runs(runner: WorkflowRunner, replays: int) -> int:
    global _executed
    history = WorkflowHistory.from_json("turn", HISTORY.read_text())
    replayer = Replayer(
        workflows=[TurnWorkflow], data_converter=pydantic_data_converter, workflow_runner=runner
    )
    _executed = []
    try:
        for _ in range(replays):
            result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            assert result.replay_failure is None, result.replay_failure
        return len(_executed)
    finally:
        _executed = None


async def test_worker_runner_never_reexecutes_the_workflow_module() -> None:
    assert await _turn_module_runs(workflow_runner(True), replays=3) == 0


async def test_the_strict_sandbox_reexecutes_it_per_run() -> None:
    """The count above can see a re-execution: the SDK's default sandbox does one per run."""
    assert await _turn_module_runs(SandboxedWorkflowRunner(), replays=3) >= 3


@pytest.mark.parametrize("sandboxed", [True, False])
def test_the_setting_still_chooses_the_runner(sandboxed: bool) -> None:
    assert isinstance(workflow_runner(sandboxed), SandboxedWorkflowRunner) is sandboxed


class _ContextAwareCodec(PayloadCodec, WithSerializationContext):
    """A codec that would encode differently per workflow or activity."""

    def __init__(self, context: SerializationContext | None = None) -> None:
        self.context = context

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    def with_context(self, context: SerializationContext) -> _ContextAwareCodec:
        return _ContextAwareCodec(context)


def test_turngates_converters_ignore_the_serialization_context(tmp_path: Path) -> None:
    settings = load_settings(artifacts=str(tmp_path))
    assert ignores_context(data_converter(settings))
    encrypted = settings.model_copy(update={"encryption_keys": SecretStr(generate_key_entry("k1"))})
    assert ignores_context(data_converter(encrypted))
    assert isinstance(workflow_runner(True, data_converter(settings)), ContextFreeSandboxRunner)


def test_a_context_aware_converter_keeps_the_sdks_sandbox() -> None:
    aware = dataclasses.replace(pydantic_data_converter, payload_codec=_ContextAwareCodec())
    assert not ignores_context(aware)
    runner = workflow_runner(True, aware)
    assert isinstance(runner, SandboxedWorkflowRunner) and not isinstance(runner, ContextFreeSandboxRunner)
    assert not isinstance(workflow_runner(True), ContextFreeSandboxRunner)  # converter unknown


async def test_the_context_free_runner_replays_without_reexecuting_the_module() -> None:
    runner = workflow_runner(True, pydantic_data_converter)
    assert isinstance(runner, ContextFreeSandboxRunner)
    assert await _turn_module_runs(runner, replays=2) == 0
