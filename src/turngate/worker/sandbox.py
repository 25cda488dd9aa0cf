"""The turn worker's workflow runner: the Temporal sandbox, with turngate's modules passed through.

The sandbox re-imports, for every workflow run, each module it does not pass through, the
workflow's own module included: for the turn that meant executing ``workflows/turn.py`` and its
``workflow.defn`` again per turn (about a third of the worker's CPU under load). turngate's
modules are passed through instead, so the definition built at start serves every run; the
sandbox still runs each workflow in its own context with the standard library's
non-deterministic calls restricted for whatever it imports itself.

What guards the determinism of turngate's workflow code then: the import contracts (workflow
modules import no I/O library, ledger, provider or activity implementation), and the replay
tests, which replay every recorded history shape under the strict sandbox (each run re-imports
the workflow module with the restrictions applied, so a wall-clock read or random number in
workflow code fails there) and under this runner.
"""

from __future__ import annotations

import logging

from temporalio.worker import UnsandboxedWorkflowRunner, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

log = logging.getLogger(__name__)

#: Packages the sandbox takes from the worker instead of importing again for each run.
PASSED_THROUGH = ("turngate",)


def workflow_runner(sandboxed: bool) -> WorkflowRunner:
    """The sandbox with :data:`PASSED_THROUGH`; without it (``TURNGATE_WORKFLOW_SANDBOX=false``)
    the plain runner, and determinism rests on the replay tests alone."""
    if sandboxed:
        restrictions = SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
        return SandboxedWorkflowRunner(restrictions=restrictions)
    log.warning("workflow sandbox OFF (TURNGATE_WORKFLOW_SANDBOX=false): determinism rests on replay tests")
    return UnsandboxedWorkflowRunner()
