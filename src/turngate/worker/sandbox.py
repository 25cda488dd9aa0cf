"""The turn worker's workflow runner: the Temporal sandbox, with turngate's modules passed through.

The sandbox re-imports, for every workflow run, each module it does not pass through, the
workflow's own module included: for the turn that meant executing ``workflows/turn.py`` and its
``workflow.defn`` again per turn (about a third of the worker's CPU under load). turngate's
modules are passed through instead, so the definition built at start serves every run; the
sandbox still runs each workflow in its own context with the standard library's
non-deterministic calls restricted for whatever it imports itself.

Each payload of an activation and of its completion is encoded by a data converter the SDK picks
per command (a serialization context: which workflow or activity the payload belongs to). With
the sandbox, every one of those picks runs a snippet inside the sandbox (compiled anew each
time, imports swapped in and out), a few ms of worker CPU per turn. turngate's converter
ignores the context (no part of it is context-aware and it stores nothing externally), so when
that holds the runner answers "no context" outside the sandbox; the payloads are encoded
exactly as before. A converter that does use the context keeps the SDK's way.

What guards the determinism of turngate's workflow code then: the import contracts (workflow
modules import no I/O library, ledger, provider or activity implementation), and the replay
tests, which replay every recorded history shape under the strict sandbox (each run re-imports
the workflow module with the restrictions applied, so a wall-clock read or random number in
workflow code fails there) and under this runner.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.converter import (
    DataConverter,
    SerializationContext,
    StorageDriverStoreContext,
    WorkflowSerializationContext,
)
from temporalio.worker import (
    UnsandboxedWorkflowRunner,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.workflow import Info

log = logging.getLogger(__name__)

#: Packages the sandbox takes from the worker instead of importing again for each run.
PASSED_THROUGH = ("turngate",)


def workflow_runner(sandboxed: bool, converter: DataConverter | None = None) -> WorkflowRunner:
    """The sandbox with :data:`PASSED_THROUGH`; without it (``TURNGATE_WORKFLOW_SANDBOX=false``)
    the plain runner, and determinism rests on the replay tests alone. Given the worker's
    ``converter`` and it :func:`ignores_context`, the sandbox is not entered to pick one."""
    if sandboxed:
        restrictions = SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
        if converter is not None and ignores_context(converter):
            return ContextFreeSandboxRunner(restrictions=restrictions)
        return SandboxedWorkflowRunner(restrictions=restrictions)
    log.warning("workflow sandbox OFF (TURNGATE_WORKFLOW_SANDBOX=false): determinism rests on replay tests")
    return UnsandboxedWorkflowRunner()


def ignores_context(converter: DataConverter) -> bool:
    """True when ``converter`` encodes every payload the same whatever its serialization
    context, and stores none externally (the SDK then returns the converter itself)."""
    probe = WorkflowSerializationContext(namespace="probe", workflow_id="probe")
    return converter.external_storage is None and converter.with_context(probe) is converter


@dataclass(frozen=True)
class ContextFreeSandboxRunner(SandboxedWorkflowRunner):
    """The sandbox, whose instances answer the converter's context questions without entering
    it. Only for a converter that :func:`ignores_context`."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _ContextFreeInstance(super().create_instance(det))


class _ContextFreeInstance(WorkflowInstance):
    """A sandboxed instance; "no context" (the converter as it is) for every payload."""

    def __init__(self, sandboxed: WorkflowInstance) -> None:
        self._sandboxed = sandboxed

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        return self._sandboxed.activate(act)

    def get_serialization_context(self, command_info: object) -> SerializationContext | None:
        return None

    def get_external_store_context(self, command_info: object) -> StorageDriverStoreContext:
        return StorageDriverStoreContext(target=None)

    def get_info(self) -> Info:
        return self._sandboxed.get_info()

    def get_thread_id(self) -> int | None:
        return self._sandboxed.get_thread_id()
