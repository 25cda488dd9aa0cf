"""The performance targets, checked against a run's results: one table row per target."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Results = dict[str, Any]

# worker + API resident memory under the overload scenario, in MB
MEMORY_LIMIT_MB = 250.0
# the slow-provider target (>= 14 turns/s with 32 slots x 2 s) as a share of the provider's bound
SLOW_SHARE = 14 / 16


@dataclass(frozen=True)
class Target:
    scenario: str
    name: str
    goal: str
    measure: Callable[[Results], Any]
    """The measured figure, from that scenario's results."""
    met: Callable[[Any], bool] | None
    """None: a figure reported beside the targets, not a target."""


def _get(*path: str) -> Callable[[Results], Any]:
    def read(results: Results) -> Any:
        value: Any = results
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    return read


def _le(limit: float) -> Callable[[Any], bool]:
    return lambda value: value is not None and value <= limit


def _ge(limit: float) -> Callable[[Any], bool]:
    return lambda value: value is not None and value >= limit


TARGETS = [
    Target("sequential", "sequential p50", "<= 45 ms", _get("latency_ms", "p50"), _le(45)),
    Target("sequential", "sequential p99", "<= 100 ms", _get("latency_ms", "p99"), _le(100)),
    Target("concurrent", "8 clients, throughput", ">= 40 turns/s", _get("turns_per_s"), _ge(40)),
    Target("concurrent", "8 clients, errors", "0", _get("errors"), _le(0)),
    Target("sequential", "history events per turn", "(reported)", _get("history_events_per_turn"), None),
    Target("concurrent", "CPU ms per turn, 8 clients", "(reported)", _get("cpu_ms_per_turn"), None),
    Target("thread", "600 chained turns, last/first p50", "<= 1.1x", _get("ratio"), _le(1.1)),
    Target("overload", "overload, lost or partial", "0", _get("lost"), _le(0)),
    Target("overload", "overload, recovers by itself", "yes", _get("recovered"), bool),
    Target(
        "overload",
        "worker+API peak RSS under overload",
        f"<= {MEMORY_LIMIT_MB:.0f} MB",
        _get("peak_rss_mb", "turngate"),
        _le(MEMORY_LIMIT_MB),
    ),
    Target(
        "slow_provider",
        "2 s provider x 32 slots",
        ">= 14 turns/s (87.5% of the bound)",
        _get("share_of_bound"),
        _ge(SLOW_SHARE),
    ),
]


def evaluate(results: dict[str, Results]) -> list[dict[str, Any]]:
    """One row per target of each scenario that ran: measured value and PASS or MISS."""
    rows = []
    for target in TARGETS:
        if target.scenario not in results:
            continue
        value = target.measure(results[target.scenario])
        rows.append(
            {
                "scenario": target.scenario,
                "target": target.name,
                "goal": target.goal,
                "measured": _describe(target, value, results[target.scenario]),
                "status": "-" if target.met is None else "PASS" if target.met(value) else "MISS",
            }
        )
    return rows


def _describe(target: Target, value: Any, result: Results) -> str:
    if target.name == "history events per turn" and isinstance(value, dict) and value.get("n"):
        return f"{value['median']:g} (min {value['min']}, max {value['max']}, {value['n']} turns)"
    if target.name.startswith("CPU ms per turn") and isinstance(value, dict):
        roles = ("api", "workers", "temporal")
        return ", ".join(f"{role} {value[role]:g}" for role in roles if role in value)
    if target.scenario == "slow_provider" and value is not None:
        steady = result["steady_turns_per_s"]
        return f"{steady} turns/s steady ({value:.0%} of {result['provider_bound_turns_per_s']})"
    if isinstance(value, float) and "ms" in target.goal:
        return f"{value:.1f} ms"
    if isinstance(value, float) and "MB" in target.goal:
        return f"{value:.0f} MB"
    return str(value)


def table(rows: list[dict[str, Any]]) -> str:
    headers = ["target", "goal", "measured", "status"]
    widths = [max(len(h), *(len(str(r[h])) for r in rows)) if rows else len(h) for h in headers]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(str(row[h]).ljust(w) for h, w in zip(headers, widths, strict=True)))
    return "\n".join(lines)
