"""The one-line hooks the activities call (spans and metrics together)."""

from __future__ import annotations

from typing import Any

from turngate.telemetry.genai import annotate_event
from turngate.telemetry.metrics import TurngateMetrics


def observe_ledger_event(event: Any, metrics: TurngateMetrics | None = None) -> None:
    """After a ledger step recorded ``event``: annotate the current (activity) span with its
    kind, index, digest, ids and, for a DECISION, the decision attributes; count the turn by
    decision and follow the ledger length. Runs in the ledger activities, outside the sandbox.

    A retried step that returns the already recorded event counts it again: turns are counted
    at least once (retries of a local ledger step are rare)."""
    annotate_event(None, event)
    if metrics is not None:
        metrics.observe_event(event)
