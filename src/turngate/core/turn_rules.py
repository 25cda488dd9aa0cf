"""Whether a turn the policy allowed goes on to its provider call, or ends in a recorded DENY.

The policy speaks first (:func:`turngate.core.decision.decide`); then a turn it allowed is
denied by the first of these that applies, in this order, and a turn already denied keeps its
own reason and error (``turngate verify`` recomputes them):

1. its system prompt could not be built (the prompt error's own code, e.g.
   ``prompt.snapshot_incompatible``, or ``SYSTEM_ERROR`` for a snapshot the store lost);
2. its model cannot be used (``provider.unknown``, ``provider.missing_credentials``, ...;
   ``model.unavailable`` when no more specific reason is known): decided here, never
   discovered at execution time;
3. the client context it carries is malformed (``intent.invalid_client_context``).

Later rules need the world (external refs, budgets) and deny the same way, through
:meth:`DecisionOutcome.denied`. Pure: no I/O, no Temporal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turngate.core.client_context import REASON_INVALID_CLIENT_CONTEXT
from turngate.core.decision import DecisionOutcome
from turngate.core.model_resolution import ModelResolution

MODEL_UNAVAILABLE = "model.unavailable"


@dataclass(frozen=True)
class Denial:
    """A reason to DENY a turn the policy allowed: the reason code and the DECISION's ``error``."""

    reason_code: str
    error: Mapping[str, Any] | None = None


def turn_denial(
    *,
    prompt_error: Mapping[str, Any] | None,
    model: ModelResolution,
    client_context_error: str | None,
) -> Denial | None:
    """The first rule that denies the turn (None: it continues)."""
    if prompt_error is not None:
        return Denial(str(prompt_error["code"]), prompt_error)
    if not model.ok:
        return Denial(model.reason_code or MODEL_UNAVAILABLE)
    if client_context_error is not None:
        return Denial(
            REASON_INVALID_CLIENT_CONTEXT,
            {"code": REASON_INVALID_CLIENT_CONTEXT, "detail": client_context_error},
        )
    return None


def deny_or_continue(
    outcome: DecisionOutcome,
    *,
    prompt_error: Mapping[str, Any] | None = None,
    model: ModelResolution,
    client_context_error: str | None = None,
) -> DecisionOutcome:
    """``outcome`` as the turn continues with it: unchanged when the policy denied it or no rule
    applies, else a DENY for the first rule that does."""
    if not outcome.allowed:
        return outcome
    denial = turn_denial(prompt_error=prompt_error, model=model, client_context_error=client_context_error)
    return outcome if denial is None else outcome.denied(denial.reason_code, denial.error)
