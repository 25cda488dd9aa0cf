"""Prometheus counters of governed spend, counted when an EXECUTION with a ``spend`` entry is
recorded (in the ledger activities; a retried step may count a turn twice, as the turn counter)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter


class SpendCounters:
    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["tenant", "model", "candidate"]
        self.tokens = Counter(
            "turngate_spend_tokens",
            "Tokens of recorded EXECUTIONs with a spend entry (model: the requested model or alias; "
            "candidate: the provider:model that answered).",
            labels,
            registry=registry,
        )
        self.cost = Counter(
            "turngate_spend_cost_micros",
            "Cost of recorded EXECUTIONs in micro-units of the models file's price currency.",
            labels,
            registry=registry,
        )

    def observe(self, event: Any) -> None:
        payload = event.payload if isinstance(event.payload, Mapping) else {}
        spend = payload.get("spend")
        if str(event.kind) != "EXECUTION" or not isinstance(spend, Mapping):
            return
        labels = {
            "tenant": event.tenant_id or "",
            "model": str(payload.get("requested_model_id") or ""),
            "candidate": str(spend.get("candidate") or ""),
        }
        self.tokens.labels(**labels).inc(int(spend.get("tokens") or 0))
        self.cost.labels(**labels).inc(int(spend.get("cost_micros") or 0))
