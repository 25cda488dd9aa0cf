"""A turn that decides again goes on from the DECISION its ledger already holds.

A turn's DECISION step runs again when the workflow task that recorded it never completed: the
worker holding it stalled past the workflow task timeout (a GC or VM pause, CPU starvation) or
died, and the retried task runs on another worker, or on a worker restarted on another
configuration. Deciding again from the same inputs gives the same bytes (no timestamps in what
is recorded), so the ledger hands back the recorded event; when something did change (the
policy, the prompt pack, the budgets' counts, the models file), the append activity hands back
the recorded DECISION instead of failing, and the turn goes on from it, never from its own:

- the recorded DECISION is a DENY: the turn ends there, nothing is executed;
- it ALLOWs the very request this run would send (the same context digest, model, token budget,
  prompt and spend candidates): the turn executes it, on the recorded spend plan;
- anything else: this run cannot execute what was recorded, so it records an EXECUTION with
  error ``turn.redecided`` and no provider call. An ALLOW never stays without its EXECUTION.

Pure functions of workflow data (deterministic, no I/O).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from turngate.core.events import OBS_KEY
from turngate.core.payloads import ExecutionPayload
from turngate.core.pointers import is_pointer
from turngate.core.spend import SpendPlan

#: EXECUTION ``error.code`` of an ALLOW this run could not execute as recorded.
REASON_REDECIDED = "turn.redecided"

#: What the step's append activity adds to a DECISION (pointers to the artifacts it stored).
_ATTACHED = frozenset({"manifest", "fault_snapshots", OBS_KEY})
#: The DECISION fields that shape the request the provider gets (with ``spend``'s candidates).
_REQUEST_FIELDS = (
    "decision",
    "context_digest",
    "token_budget",
    "provider",
    "requested_model_id",
    "resolved_model_id",
    "prompt",
    "external_context",
)

Next = Literal["execute", "stop", "end"]


def _without_times(value: Any) -> Any:
    """``value`` with every artifact pointer's ``created_at`` left out (older events carry it)."""
    if isinstance(value, Mapping):
        pointer = is_pointer(value)
        return {k: _without_times(v) for k, v in value.items() if not (pointer and k == "created_at")}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _comparable(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A DECISION payload without what each run's append step attached, nor pointer times."""
    kept = {key: value for key, value in payload.items() if key not in _ATTACHED}
    result: dict[str, Any] = _without_times(kept)
    return result


def _admitted(spend: Any) -> list[Any] | None:
    if not isinstance(spend, Mapping):
        return None
    candidates = spend.get("candidates") or []
    return [c.get("candidate") for c in candidates if isinstance(c, Mapping) and c.get("admitted")]


def next_step(recorded: Mapping[str, Any], ours: Mapping[str, Any], *, executable: bool) -> Next:
    """What the turn does when its DECISION step got back another run's DECISION: ``recorded``
    is what the ledger holds, ``ours`` what this run decided (before any SYSTEM_ERROR it met),
    ``executable`` whether this run has a request to send (an ALLOW with its assembly)."""
    if recorded.get("decision") != "ALLOW":
        return "stop"
    mine, theirs = _comparable(ours), _comparable(recorded)
    same_request = all(mine.get(key) == theirs.get(key) for key in _REQUEST_FIELDS)
    if executable and same_request and _admitted(mine.get("spend")) == _admitted(theirs.get("spend")):
        return "execute"
    return "end"


def recorded_plan(recorded: Mapping[str, Any], plan: SpendPlan | None) -> SpendPlan | None:
    """The spend plan to execute on: the recorded DECISION's (its prices price the EXECUTION;
    its candidates are this run's, :func:`next_step` checked)."""
    spend = recorded.get("spend")
    return SpendPlan.model_validate(spend) if plan is not None and isinstance(spend, Mapping) else plan


def unexecuted(recorded: Mapping[str, Any]) -> ExecutionPayload:
    """The EXECUTION that ends a recorded ALLOW this run cannot execute: no provider call."""
    return ExecutionPayload(
        provider=recorded.get("provider"),
        model_id=recorded.get("resolved_model_id"),
        requested_model_id=recorded.get("requested_model_id"),
        resolved_model_id=recorded.get("resolved_model_id"),
        context_digest=recorded.get("context_digest"),
        error={
            "code": REASON_REDECIDED,
            "detail": "the turn was decided again (its workflow task ran again) and came to another "
            "DECISION than the recorded one; the recorded ALLOW is not executed",
        },
    )
